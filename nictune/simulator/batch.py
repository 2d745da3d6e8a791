"""A batch of settings as arrays: P settings-vectors × T transmissions (the fast engine's input).

`SettingBatch` holds one array per `NicSetting` field, each of shape (P, T): row p is one
candidate plan (one setting per transmission), column t one transmission. Modes and
placements are indices into `nictune.model.MODES` / `PLACEMENTS`; parameters a mode does not
use are stored as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nictune.model import MODES, PLACEMENTS, NicSetting

ACTIVE, PASSIVE, WATERMARK, BUSY = (MODES.index(m) for m in (
    "active_wait", "passive_wait", "watermark", "busy_poll"))


@dataclass
class SettingBatch:
    """Settings of shape (P, T); see the module docstring."""

    mode: np.ndarray  # int8, index into MODES
    poll_interval: np.ndarray  # float64 s (passive_wait)
    watermark: np.ndarray  # float64 packets (watermark)
    watermark_timeout: np.ndarray  # float64 s (watermark; 0 = none)
    ring_slots: np.ndarray  # float64 slots
    irq_core: np.ndarray  # int64
    placement: np.ndarray  # int8, index into PLACEMENTS

    def __post_init__(self) -> None:
        self.mode = np.asarray(self.mode, dtype=np.int8)
        self.irq_core = np.asarray(self.irq_core, dtype=np.int64)
        self.placement = np.asarray(self.placement, dtype=np.int8)
        for name in ("poll_interval", "watermark", "watermark_timeout", "ring_slots"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        shapes = {a.shape for a in self.arrays()}
        if len(shapes) != 1 or len(self.mode.shape) != 2:
            raise ValueError(f"SettingBatch arrays must share one 2-D shape (P, T), got {shapes}")

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.mode, self.poll_interval, self.watermark, self.watermark_timeout,
                self.ring_slots, self.irq_core, self.placement)

    @property
    def shape(self) -> tuple[int, int]:
        return self.mode.shape  # type: ignore[return-value]

    @classmethod
    def from_settings(cls, rows: Sequence[Sequence[NicSetting]]) -> SettingBatch:
        """A batch from P lists of T settings (row p, column t)."""
        p, t = len(rows), len(rows[0]) if rows else 0
        if any(len(r) != t for r in rows):
            raise ValueError("every row of settings must have one setting per transmission")
        out = {k: np.zeros((p, t)) for k in ("poll_interval", "watermark", "watermark_timeout",
                                             "ring_slots")}
        mode = np.zeros((p, t), dtype=np.int8)
        core = np.zeros((p, t), dtype=np.int64)
        placement = np.zeros((p, t), dtype=np.int8)
        for i, row in enumerate(rows):
            for j, s in enumerate(row):
                mode[i, j] = MODES.index(s.mode)
                placement[i, j] = PLACEMENTS.index(s.placement)
                core[i, j] = s.irq_core
                out["ring_slots"][i, j] = s.ring_slots
                out["poll_interval"][i, j] = s.poll_interval or 0.0
                out["watermark"][i, j] = s.watermark or 0
                out["watermark_timeout"][i, j] = s.watermark_timeout or 0.0
        return cls(mode=mode, irq_core=core, placement=placement, **out)

    def setting(self, p: int, t: int) -> NicSetting:
        """The `NicSetting` at row p, column t (unused parameters are None)."""
        mode = MODES[int(self.mode[p, t])]
        return NicSetting(
            mode=mode,
            ring_slots=round(float(self.ring_slots[p, t])),
            poll_interval=float(self.poll_interval[p, t]) if mode == "passive_wait" else None,
            watermark=round(float(self.watermark[p, t])) if mode == "watermark" else None,
            watermark_timeout=(float(self.watermark_timeout[p, t]) if mode == "watermark"
                               else None),
            irq_core=int(self.irq_core[p, t]),
            placement=PLACEMENTS[int(self.placement[p, t])],
        )
