"""nictune: tune NIC receive settings per data transmission."""

__version__ = "0.1.0"
