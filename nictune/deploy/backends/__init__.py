"""Knob backends: one module per kind of knob, all with the same small contract.

A knob is a flat key (`nic/<NIC>/<backend>/<param>` or `host/<backend>/<param>`) with a
JSON value. Each backend module defines `NAME` and

* `read(probe) -> {knob: value}` — the current values, from a `HostProbe`;
* `plan(ctx) -> ({knob: target}, [Note])` — the targets for the plan's settings (knobs a
  mode does not set go back to their ORIGINAL, pre-nictune value, so an arm is fully
  defined whatever ran before) plus notes: unsupported (+ the fallback used), rounded,
  clamped, approximation, not expressible, unavailable;
* `commands(ctx, {knob: value}) -> [shell command]` — set those values; the same function
  restores (called with the before-values), so apply and restore share one code path;
* `matches(knob, want, got, exact=False) -> bool` — read-back comparison (driver rounding
  tolerated where the kernel may round, unless `exact`: `want` was itself read from the
  host — a snapshot's value — so the driver holds it as it is);
* `valid(knob, value) -> bool` — whether `read` could have given that knob (its scope,
  nic or host, and param) that value: a snapshot nictune did not write is refused before
  it touches the host.

`backends()` gives the apply order; restore runs in reverse.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from nictune.deploy.inventory import HostInventory
from nictune.deploy.probe import HostProbe, NicProbe
from nictune.model import NicSetting

DEFER_HARD_IRQS = 2  # napi_defer_hard_irqs for passive_wait (DESIGN §2: "> 0")
BUSY_POLL_US = 50  # net.core.busy_read / busy_poll for busy_poll


@dataclass(frozen=True)
class Note:
    """Something the user must know about how a setting was realised."""

    host: str
    nic: str  # "" for host-wide knobs
    backend: str
    kind: str  # unsupported|rounded|clamped|approximation|not_expressible|unavailable|warning
    detail: str
    fallback: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        where = f"{self.host}/{self.nic}" if self.nic else self.host
        extra = f"; fallback: {self.fallback}" if self.fallback else ""
        return f"{where} {self.backend}: {self.kind}: {self.detail}{extra}"


@dataclass
class HostContext:
    """What a backend needs to plan one host."""

    host: HostInventory
    probe: HostProbe
    original: dict[str, Any]  # pre-nictune knob values (the snapshot)
    settings: dict[str, NicSetting] = field(default_factory=dict)  # NIC id -> setting

    def nic(self, nic_id: str) -> NicProbe:
        return self.probe.nics[nic_id]

    def note(self, nic: str, backend: str, kind: str, detail: str,
             fallback: str = "") -> Note:
        return Note(self.host.name, nic, backend, kind, detail, fallback)

    def want(self, targets: dict[str, Any], notes: list[Note], nic: str, backend: str,
             param: str, value: Any, missing: str) -> None:
        """Make `value` the target of the NIC's knob, or note it `unsupported` (`missing`
        says why) when the host has no such knob."""
        key = nic_key(nic, backend, param)
        if key in self.original:
            targets[key] = value
        else:
            notes.append(self.note(nic, backend, "unsupported", missing))


def nic_key(nic: str, backend: str, param: str) -> str:
    return f"nic/{nic}/{backend}/{param}"


def host_key(backend: str, param: str) -> str:
    return f"host/{backend}/{param}"


def split_key(key: str) -> tuple[str, str, str]:
    """(nic or "", backend, param) of a knob key."""
    parts = key.split("/", 3)
    if parts[0] == "nic":
        return parts[1], parts[2], parts[3]
    return "", parts[1], parts[2]


def originals(ctx: HostContext, prefix: str) -> dict[str, Any]:
    """The original values of every knob whose key starts with `prefix`."""
    return {k: v for k, v in ctx.original.items() if k.startswith(prefix)}


def ethtool_value(value: Any) -> str:
    """How ethtool takes a knob value: booleans as on/off, numbers as integers."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value if isinstance(value, str) else str(int(value))


def ethtool_commands(ctx: HostContext, values: dict[str, Any], option: str,
                     name: Callable[[str], str] = str) -> list[str]:
    """One `ethtool OPTION IFACE param value ...` per NIC for `{knob: value}`; `name` maps
    a knob's param to ethtool's word for it."""
    by_nic: dict[str, list[str]] = {}
    for key, value in values.items():
        nic, _, param = split_key(key)
        by_nic.setdefault(nic, []).extend([name(param), ethtool_value(value)])
    return [shlex.join(["ethtool", option, ctx.host.iface(nic), *args])
            for nic, args in by_nic.items()]


def default_matches(key: str, want: Any, got: Any, exact: bool = False) -> bool:
    return want == got


def names(backend: ModuleType) -> tuple[str, ...]:
    """The `…/name/…` parts of a backend's knob keys (irq_affinity has two)."""
    return getattr(backend, "NAMES", (backend.NAME,))


def backend(name: str) -> ModuleType:
    """The backend module whose knobs are `…/name/…` (KeyError: none)."""
    for b in backends():
        if name in names(b):
            return b
    raise KeyError(name)


@functools.cache
def backends() -> tuple[ModuleType, ...]:
    """The backend modules in apply order (imported on first use: they import this module).

    Cached, not a lazily filled list: hosts are deployed from parallel threads, and two
    threads filling one list would run every backend twice."""
    from nictune.deploy.backends import (
        busy_poll_sysctl,
        ethtool_channels,
        ethtool_coalesce,
        ethtool_features,
        ethtool_ring,
        irq_affinity,
        napi_sysfs,
        pfring,
    )

    # Files last: a failing file write then proves the restore of every earlier knob.
    return (ethtool_features, ethtool_channels, ethtool_ring, ethtool_coalesce, napi_sysfs,
            irq_affinity, busy_poll_sysctl, pfring)
