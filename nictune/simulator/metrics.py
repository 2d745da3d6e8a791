"""What one simulation of one transmission under one setting reports (DESIGN §4, contract).

Both engines (`des`, `fast`) return `Metrics`; `to_json` gives exactly the contract keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nictune.model import NicSetting, Transmission

CONTRACT_KEYS = (
    "transmission", "engine", "setting", "packets_offered", "packets_delivered",
    "packets_dropped", "packets_stranded", "bytes_delivered", "duration_s", "offered_bps",
    "throughput_bps", "interrupts", "empty_wakeups", "cpu_busy_s", "cpu_util",
    "latency_mean_s", "latency_p99_s", "energy_j", "window_packets", "extrapolated",
)


@dataclass(frozen=True)
class Metrics:
    """Counts are for the whole transmission (scaled when a window was extrapolated).

    `duration_s` runs from the first arrival to the last delivery; `throughput_bps` is
    8 · bytes_delivered / duration_s; `interrupts` counts every wake-up that paid `irq`
    (per packet, timer or watermark) and `empty_wakeups` the ones that found nothing;
    `cpu_util` is cpu_busy_s / duration_s on the NIC's IRQ core.
    """

    transmission: str
    engine: str
    setting: NicSetting
    packets_offered: int
    packets_delivered: int
    packets_dropped: int
    packets_stranded: int
    bytes_delivered: float
    duration_s: float
    offered_bps: float
    throughput_bps: float
    interrupts: float
    empty_wakeups: float
    cpu_busy_s: float
    cpu_util: float
    latency_mean_s: float
    latency_p99_s: float
    energy_j: float
    window_packets: int
    extrapolated: bool

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in CONTRACT_KEYS:
            value = getattr(self, key)
            out[key] = value.to_json() if key == "setting" else value
        return out


def ends_on_timeout(after_arrivals: float, timeout: float | None) -> bool:
    """Whether a watermark consumer's last packets waited for its timeout: the transfer
    ended between half a timeout and one and a half after its last arrival (the wait
    starts at the first of those packets, before the last arrival; much longer is a
    backlog draining)."""
    return bool(timeout) and timeout / 2.0 <= after_arrivals <= 1.5 * timeout


@dataclass(frozen=True)
class CoreLoad:
    """What one IRQ core's transmissions ask of it (`core_load`)."""

    peak: float  # the largest sum of CPU shares at one moment, busy-pollers left out
    busy_polling: int  # how many NICs busy-poll there (the model charges a core each)
    dropped: int
    offered: int

    def describe(self) -> str:
        """E.g. `107 % + 2 busy-polled NICs, 8.1 % dropped`."""
        return (f"{100 * self.peak:.3g} %"
                + (f" + {self.busy_polling} busy-polled NIC"
                   + ("s" * (self.busy_polling > 1)) if self.busy_polling else "")
                + (f", {100 * self.dropped / max(self.offered, 1):.2g} % dropped"
                   if self.dropped else ""))


def core_load(metrics: Sequence[Metrics], transmissions: Sequence[Transmission]) -> CoreLoad:
    """One core's transmissions, each running from its start for its duration: the
    largest sum of the CPU shares of those running at one moment (a share is of its own
    duration; busy-pollers, which the model charges a core per NIC though they yield to
    the others' work, are counted apart, as their NICs), and their packets dropped and
    offered."""
    pairs = list(zip(metrics, transmissions, strict=True))
    spans = [(t.start, t.start + m.duration_s, m.cpu_util)
             for m, t in pairs if m.setting.mode != "busy_poll"]
    peak = max((sum(u for a, b, u in spans if a <= x < b) for x, _, _ in spans), default=0.0)
    return CoreLoad(peak, len({t.nic for m, t in pairs if m.setting.mode == "busy_poll"}),
                    sum(m.packets_dropped for m in metrics),
                    sum(m.packets_offered for m in metrics))
