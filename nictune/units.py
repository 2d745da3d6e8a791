"""Human units in configs (`7.5GB`, `10Gbit/s`, `500ms`, `20us`) parsed to SI.

Every parser takes a number (already SI) or a string with a unit and returns a float in
SI units; a bad value raises `ValueError` with a short reason that the caller prefixes with
the file and field it came from.
"""

from __future__ import annotations

import math
import re

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/%]*)\s*$")

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

SIZE_UNITS: dict[str, float] = {"B": 1.0}
SIZE_UNITS.update({p + "B": f for p, f in _DECIMAL.items() if p})
SIZE_UNITS.update({p + "B": f for p, f in _BINARY.items()})

TIME_UNITS: dict[str, float] = {
    "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0,
}
BITRATE_UNITS: dict[str, float] = {p + "bit/s": f for p, f in _DECIMAL.items()}
BITRATE_UNITS.update({p + "bps": f for p, f in _DECIMAL.items()})
PACKET_RATE_UNITS: dict[str, float] = {p + "pps": f for p, f in _DECIMAL.items()}
BYTERATE_UNITS: dict[str, float] = {k + "/s": v for k, v in SIZE_UNITS.items()}
POWER_UNITS: dict[str, float] = {"W": 1.0, "mW": 1e-3, "kW": 1e3}


def shown_int(value: int) -> str:
    """An integer for a message: its digits, or how many there are past 20."""
    text = str(value)
    return text if len(text) <= 20 else f"an integer of {len(text)} digits"


def is_number(value: object) -> bool:
    """An int or float read from YAML or JSON (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """An int or float, not a bool, NaN or infinity."""
    return is_number(value) and math.isfinite(value)  # type: ignore[arg-type]


def as_float(value: int | float) -> float:
    """`value` as a float; an integer beyond float's range is a ValueError like any bad
    number (float() raises OverflowError there)."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"must be a finite number, got {shown_int(int(value))}") from None


def _split(value: object, kind: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind}, got {value!r}")
    if isinstance(value, int | float):
        return as_float(value), ""
    if not isinstance(value, str):
        raise ValueError(f"expected a {kind}, got {value!r}")
    match = _NUMBER.match(value)
    if not match:
        raise ValueError(f"expected a {kind} such as {_EXAMPLES[kind]}, got {value!r}")
    return float(match.group(1)), match.group(2)


_EXAMPLES = {
    "size": "'7.5GB' or '64KiB'",
    "duration": "'500ms' or '20us'",
    "rate": "'3600pps' or '40Mbit/s'",
    "bit rate": "'10Gbit/s'",
    "byte rate": "'20GB/s'",
    "power": "'10W'",
}


def _scaled(value: object, kind: str, units: dict[str, float]) -> float:
    number, unit = _split(value, kind)
    if unit and unit not in units:
        known = ", ".join(sorted(units, key=lambda u: (units[u], u)))
        raise ValueError(f"unknown unit {unit!r} in {value!r} (known: {known})")
    return number * units.get(unit, 1.0)


def parse_size(value: object) -> float:
    """Bytes from `7.5GB` (10^9), `1GiB` (2^30), `1500B` or a plain number of bytes."""
    return _scaled(value, "size", SIZE_UNITS)


def parse_duration(value: object) -> float:
    """Seconds from `500ms`, `20us`, `1s` or a plain number of seconds."""
    return _scaled(value, "duration", TIME_UNITS)


def parse_bitrate(value: object) -> float:
    """Bits per second from `10Gbit/s`, `40Mbps` or a plain number of bit/s."""
    return _scaled(value, "bit rate", BITRATE_UNITS)


def parse_byterate(value: object) -> float:
    """Bytes per second from `20GB/s` or a plain number of bytes/s."""
    return _scaled(value, "byte rate", BYTERATE_UNITS)


def parse_power(value: object) -> float:
    """Watts from `10W`, `500mW` or a plain number of watts."""
    return _scaled(value, "power", POWER_UNITS)


def parse_rate(value: object, packet_size: float) -> float:
    """Packets per second from `3600pps`, or a bit rate (`40Mbit/s`) of `packet_size` packets.

    A plain number is packets per second.
    """
    number, unit = _split(value, "rate")
    if unit in PACKET_RATE_UNITS or unit == "":
        return number * PACKET_RATE_UNITS.get(unit, 1.0)
    if unit in BITRATE_UNITS:
        return number * BITRATE_UNITS[unit] / (8.0 * packet_size)
    raise ValueError(f"unknown unit {unit!r} in {value!r} (use pps, kpps, Mbit/s, Gbit/s, ...)")


def format_bitrate(bps: float) -> str:
    """`12.3 Mbit/s` style, for tables."""
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(bps) >= factor:
            return f"{bps / factor:.2f} {prefix}bit/s"
    return f"{bps:.1f} bit/s"


def format_duration(seconds: float, digits: int = 3) -> str:
    """`500 ms`, `20 us` style, for tables (`digits` significant digits)."""
    return _in_unit(seconds, ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")), digits)


def format_size(size: float, digits: int = 3) -> str:
    """`7.5 GB`, `64 B` style (powers of 10), for tables."""
    return _in_unit(size, ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")),
                    digits)


def _in_unit(value: float, units: tuple[tuple[float, str], ...], digits: int) -> str:
    """`value` in the largest of `units` it reaches once rounded to `digits` significant
    digits (so 999.9 ms is `1 s`, not `1e+03 ms`); the last unit below them all."""
    value = float(f"{value:.{digits}g}")
    factor, unit = next(((f, u) for f, u in units if abs(value) >= f), units[-1])
    return f"{value / factor:.{digits}g} {unit}"
