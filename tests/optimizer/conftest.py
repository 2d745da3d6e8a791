"""A small config for the optimizer tests: two single-NIC hosts and one shared host."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

SMALL = {
    "hosts": {"solo-a": {"cores": 2}, "solo-b": {"cores": 2}, "shared": {"cores": 2}},
    "nics": {
        "na": {"host": "solo-a", "link": "1Gbit/s", "max_ring_slots": 4096},
        "nb": {"host": "solo-b", "link": "1Gbit/s", "max_ring_slots": 4096},
        "s1": {"host": "shared", "link": "10Gbit/s", "max_ring_slots": 4096},
        "s2": {"host": "shared", "link": "10Gbit/s", "max_ring_slots": 4096, "irq_core": 1},
    },
    "transmissions": [
        {"id": "a", "nic": "na", "size": "3MB", "packet_size": 1500, "rate": "4000pps",
         "arrival": "cbr"},
        {"id": "b", "nic": "nb", "size": "1MB", "packet_size": 500, "rate": "20000pps",
         "max_latency_p99": "20ms",
         "default": {"mode": "active_wait", "ring_slots": 1024}},
        {"id": "c", "nic": "s1", "size": "2MB", "packet_size": 1000, "rate": "50000pps"},
        {"id": "d", "nic": "s2", "size": "2MB", "packet_size": 1000, "rate": "30000pps",
         "default": {"mode": "passive_wait", "poll_interval": "2ms", "ring_slots": 2048,
                     "irq_core": 1}},
    ],
}


@pytest.fixture
def small_config(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def small_config_text() -> str:
    return yaml.safe_dump(SMALL, sort_keys=False)
