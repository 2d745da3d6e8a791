"""Genes ↔ settings: every vector of floats in [0, 1) decodes to a valid setting.

Each NIC that receives a transmission owns one block of `GENES_PER_NIC` genes (a NIC has
one ring and one IRQ core, so the transmissions sharing it share its setting):

| gene | decodes to |
|---|---|
| 0 mode | one of `MODES` (4 equal bins) |
| 1 poll interval | log scale 10 µs – 1 s |
| 2 watermark | log scale 1 – ring/2 packets (relative to the decoded ring) |
| 3 watermark timeout | 0 below 0.1, else log scale 10 µs – 1 s |
| 4 ring slots | one of the powers of two within the NIC's min/max |
| 5 irq core | 0 … cores−1 (shared hosts only; else the default's) |
| 6 placement | one of `PLACEMENTS` (shared hosts only; else the default's) |

Continuous genes saturate in the outer 5 % of their range, so the extremes (the largest
watermark, the longest interval) are reachable by mutation. Every range is widened to
include the NIC's default setting and the default itself decodes exactly, so a population
seeded with `default_genes()` evaluates the setting the hosts have today.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nictune.model import MODES, PLACEMENTS, Config, NicSetting
from nictune.simulator.batch import SettingBatch

GENES_PER_NIC = 7
POLL_RANGE = (10e-6, 1.0)
TIMEOUT_RANGE = (10e-6, 1.0)
TIMEOUT_OFF = 0.1  # genes below this mean "no timeout"
_EDGE = 0.05  # saturating share at each end of a continuous gene
_PASSIVE, _WATERMARK = MODES.index("passive_wait"), MODES.index("watermark")


def _unit(g: np.ndarray, low: float = 0.0) -> np.ndarray:
    """Map genes in [low, 1] to [0, 1], saturating in the outer `_EDGE` of the range."""
    span = 1.0 - low
    return np.clip((g - low - _EDGE * span) / ((1.0 - 2 * _EDGE) * span), 0.0, 1.0)


def _gene(u: float, low: float = 0.0) -> float:
    """Inverse of `_unit` for u in [0, 1]."""
    span = 1.0 - low
    return low + span * (_EDGE + (1.0 - 2 * _EDGE) * u)


def _bin(g: np.ndarray, n: int) -> np.ndarray:
    return np.clip((g * n).astype(np.int64), 0, n - 1)


def _significant(x: np.ndarray, digits: int = 4) -> np.ndarray:
    """x rounded to `digits` significant digits (the nearest double of that decimal)."""
    scale = 10.0 ** (digits - 1 - np.floor(np.log10(x)))
    return np.round(x * scale) / scale


@dataclass(frozen=True)
class LogRange:
    """A log-scaled duration range that contains `default` and decodes it exactly."""

    low: float
    high: float
    default: float | None

    @classmethod
    def around(cls, bounds: tuple[float, float], default: float | None) -> LogRange:
        low, high = bounds
        if default:
            low, high = min(low, default), max(high, default)
        return cls(low, high, default or None)

    def value(self, u: np.ndarray) -> np.ndarray:
        """Durations at positions u in [0, 1]: 4 significant digits, ends exact."""
        raw = self.low * (self.high / self.low) ** u
        out = np.clip(_significant(raw), self.low, self.high)
        if self.default:
            out = np.where(np.abs(raw - self.default) <= 1e-9 * self.default, self.default,
                           out)
        return np.where(u <= 0.0, self.low, np.where(u >= 1.0, self.high, out))

    def unit(self, value: float) -> float:
        return math.log(value / self.low) / math.log(self.high / self.low)


@dataclass(frozen=True)
class NicSpace:
    """The search space of one NIC."""

    nic: str
    host: str
    default: NicSetting
    rings: tuple[int, ...]
    cores: int
    shared: bool  # the host has other NICs: irq core and placement are searched
    poll: LogRange
    timeout: LogRange

    def decode_many(self, g: np.ndarray) -> dict[str, np.ndarray]:
        """Gene blocks (P, 7) → SettingBatch fields (P,); unused parameters are 0."""
        ring = np.asarray(self.rings, dtype=np.int64)[_bin(g[:, 4], len(self.rings))]
        mode = _bin(g[:, 0], len(MODES))
        mode = np.where((mode == _WATERMARK) & (ring < 2), _PASSIVE, mode)
        half = np.maximum(ring // 2, 1)
        with np.errstate(divide="ignore"):
            mark = np.clip(np.round(half ** _unit(g[:, 2])), 1, half)
        timeout = np.where(g[:, 3] < TIMEOUT_OFF, 0.0,
                           self.timeout.value(_unit(g[:, 3], TIMEOUT_OFF)))
        n = len(g)
        core = (_bin(g[:, 5], self.cores) if self.shared
                else np.full(n, self.default.irq_core, dtype=np.int64))
        place = (_bin(g[:, 6], len(PLACEMENTS)) if self.shared
                 else np.full(n, PLACEMENTS.index(self.default.placement), dtype=np.int64))
        return {"mode": mode, "ring_slots": ring.astype(float), "irq_core": core,
                "placement": place,
                "poll_interval": np.where(mode == _PASSIVE, self.poll.value(_unit(g[:, 1])),
                                          0.0),
                "watermark": np.where(mode == _WATERMARK, mark, 0.0),
                "watermark_timeout": np.where(mode == _WATERMARK, timeout, 0.0)}

    def decode(self, g: np.ndarray | list[float]) -> NicSetting:
        """The setting of one gene block (7 floats in [0, 1])."""
        one = self.decode_many(np.asarray(g, dtype=float)[None, :GENES_PER_NIC])
        return SettingBatch(**{k: v[:, None] for k, v in one.items()}).setting(0, 0)

    def encode(self, s: NicSetting) -> list[float]:
        """A gene block that decodes to `s` (which must lie in this space)."""
        rings, half = self.rings, s.ring_slots // 2
        g = [(MODES.index(s.mode) + 0.5) / len(MODES), 0.5, 0.5, 0.05,
             (rings.index(s.ring_slots) + 0.5) / len(rings),
             (s.irq_core + 0.5) / self.cores,
             (PLACEMENTS.index(s.placement) + 0.5) / len(PLACEMENTS)]
        if s.mode == "passive_wait" and s.poll_interval:
            g[1] = _gene(self.poll.unit(s.poll_interval))
        if s.mode == "watermark":
            g[2] = _gene(math.log(s.watermark or 1) / math.log(half)) if half > 1 else 0.5
            if s.watermark_timeout:
                g[3] = _gene(self.timeout.unit(s.watermark_timeout), TIMEOUT_OFF)
        return g


def _rings(low: int, high: int, default: int) -> tuple[int, ...]:
    powers = {1 << k for k in range(21) if low <= 1 << k <= high}
    return tuple(sorted(powers | {default}))


class Encoding:
    """The gene layout of a config: one block per NIC, hosts as independent groups."""

    def __init__(self, config: Config):
        self.config = config
        self.transmissions = list(config.transmissions)
        first: dict[str, NicSetting] = {}
        for t in self.transmissions:
            first.setdefault(t.nic, config.default_setting(t))
        several = config.several_nics
        self.spaces: list[NicSpace] = []
        for name, default in first.items():
            nic = config.nics[name]
            self.spaces.append(NicSpace(
                nic=name, host=nic.host, default=default,
                rings=_rings(nic.min_ring_slots, nic.max_ring_slots, default.ring_slots),
                cores=config.hosts[nic.host].cores, shared=nic.host in several,
                poll=LogRange.around(POLL_RANGE, default.poll_interval),
                timeout=LogRange.around(TIMEOUT_RANGE, default.watermark_timeout)))
        self.nic_index = {s.nic: i for i, s in enumerate(self.spaces)}
        self.hosts = list(dict.fromkeys(s.host for s in self.spaces))
        self.size = GENES_PER_NIC * len(self.spaces)
        # Per host: its gene columns and its transmission columns.
        self.host_genes: list[np.ndarray] = []
        self.host_transmissions: list[np.ndarray] = []
        for host in self.hosts:
            cols = [i * GENES_PER_NIC + k for i, s in enumerate(self.spaces) if s.host == host
                    for k in range(GENES_PER_NIC)]
            self.host_genes.append(np.array(cols, dtype=np.int64))
            self.host_transmissions.append(np.array(
                [j for j, t in enumerate(self.transmissions)
                 if config.nics[t.nic].host == host], dtype=np.int64))

    def batch(self, genes: np.ndarray) -> SettingBatch:
        """The settings of gene rows (P, G) as a SettingBatch (P, transmissions)."""
        genes = np.asarray(genes, dtype=float)
        per_nic = [s.decode_many(genes[:, i * GENES_PER_NIC:(i + 1) * GENES_PER_NIC])
                   for i, s in enumerate(self.spaces)]
        cols = [self.nic_index[t.nic] for t in self.transmissions]
        return SettingBatch(**{k: np.stack([per_nic[i][k] for i in cols], axis=1)
                               for k in per_nic[0]})

    def nic_settings(self, genes: np.ndarray | list[float]) -> list[NicSetting]:
        """The setting of every NIC (in `spaces` order)."""
        row = np.asarray(genes, dtype=float)  # (once: per NIC it made the reports quadratic)
        return [s.decode(row[i * GENES_PER_NIC:(i + 1) * GENES_PER_NIC])
                for i, s in enumerate(self.spaces)]

    def settings(self, genes: np.ndarray | list[float]) -> list[NicSetting]:
        """The setting of every transmission (in config order)."""
        b = self.batch(np.asarray(genes, dtype=float)[None, :])
        return [b.setting(0, t) for t in range(len(self.transmissions))]

    def corners(self) -> list[list[float]]:
        """Every mode with all its parameters at their lower, then upper ends (the
        shortest / longest interval and timeout, the smallest / largest watermark and
        ring); irq core and placement as in the defaults."""
        out = []
        base = np.array(self.default_genes())
        for mode in range(len(MODES)):
            for end in (0.0, 1.0):
                g = base.copy().reshape(-1, GENES_PER_NIC)
                g[:, 0] = (mode + 0.5) / len(MODES)
                g[:, 1:5] = end
                out.append(g.ravel().tolist())
        return out

    def default_genes(self) -> list[float]:
        """Genes that decode to every NIC's default setting."""
        out: list[float] = []
        for s in self.spaces:
            out.extend(s.encode(s.default))
        return out
