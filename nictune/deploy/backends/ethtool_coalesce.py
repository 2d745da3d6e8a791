"""NIC interrupt coalescing (`ethtool -C`), DESIGN §2:

active_wait `rx-usecs 0 rx-frames 1 adaptive-rx off` (rx-frames only where the NIC reads a
non-zero rx-frames); passive_wait `rx-usecs T rx-frames 0`
(the NIC timer starts at the first packet: an approximation, reported); watermark
`rx-frames W rx-usecs timeout`; busy_poll leaves the NIC at its original values. A NIC
without coalescing (veth) is reported `unsupported`; the NAPI sysfs knobs carry the setting.
"""

from __future__ import annotations

from typing import Any

from nictune.deploy.backends import (
    HostContext,
    Note,
    default_matches,
    ethtool_commands,
    nic_key,
    originals,
    split_key,
)
from nictune.deploy.parsers import is_u32
from nictune.deploy.probe import HostProbe

NAME = "coalesce"
PARAMS = ("adaptive-rx", "rx-usecs", "rx-frames")
matches = default_matches


def valid(knob: str, value: Any) -> bool:
    nic, _, param = split_key(knob)
    if not nic or param not in PARAMS:
        return False
    return isinstance(value, bool) if param == "adaptive-rx" else is_u32(value)


def read(probe: HostProbe) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for nic_id, nic in probe.nics.items():
        for param in PARAMS:
            value = (nic.coalesce or {}).get(param)
            if value is not None:
                out[nic_key(nic_id, NAME, param)] = value
    return out


def _usecs(seconds: float, ctx: HostContext, nic: str, what: str,
           notes: list[Note]) -> int:
    exact = seconds * 1e6
    value = round(exact)
    if abs(value - exact) > 1e-6:
        notes.append(ctx.note(nic, NAME, "rounded", f"{what} {exact:g} us -> {value} us"))
    return value


def wanted(ctx: HostContext, nic: str, notes: list[Note]) -> dict[str, Any]:
    s = ctx.settings[nic]
    if s.mode == "active_wait":
        # rx-frames 1 only where the driver counts frames (it read non-zero before
        # nictune: the snapshot's value, so the target does not depend on what an earlier
        # deploy left): with rx-usecs 0 the NIC interrupts per packet anyway, and a driver
        # without frame counting refuses any non-zero value (i40e, which an ioctl-era
        # ethtool shows as 0)
        if ctx.original.get(nic_key(nic, NAME, "rx-frames")):
            return {"adaptive-rx": False, "rx-usecs": 0, "rx-frames": 1}
        return {"adaptive-rx": False, "rx-usecs": 0}
    if s.mode == "passive_wait":
        notes.append(ctx.note(nic, NAME, "approximation",
                              "rx-usecs starts at the first packet, not a free-running poll "
                              "timer"))
        return {"adaptive-rx": False, "rx-frames": 0,
                "rx-usecs": _usecs(s.poll_interval or 0.0, ctx, nic, "poll interval", notes)}
    if s.mode == "watermark":
        return {"adaptive-rx": False, "rx-frames": s.watermark,
                "rx-usecs": _usecs(s.watermark_timeout or 0.0, ctx, nic, "watermark timeout",
                                   notes)}
    return {}  # busy_poll: the NIC stays at its original values


FALLBACK = {
    "active_wait": "napi sysfs gro_flush_timeout 0 / napi_defer_hard_irqs 0",
    "passive_wait": "napi sysfs gro_flush_timeout T / napi_defer_hard_irqs (software timer)",
    "watermark": "none in the kernel (a packet-count watermark is not expressible); the "
                 "PF_RING capture profile carries it",
}


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets, notes = originals(ctx, "nic/"), []
    targets = {k: v for k, v in targets.items() if split_key(k)[1] == NAME}
    for nic in ctx.settings:
        want = wanted(ctx, nic, notes)
        if not want:
            continue
        if ctx.nic(nic).coalesce is None:
            notes.append(ctx.note(nic, NAME, "unsupported",
                                  f"{ctx.nic(nic).iface} has no interrupt coalescing "
                                  f"({ctx.nic(nic).errors.get('c', 'ethtool -c failed')})",
                                  FALLBACK[ctx.settings[nic].mode]))
            continue
        for param, value in want.items():
            ctx.want(targets, notes, nic, NAME, param, value,
                     f"{param} is n/a on {ctx.nic(nic).iface}; wanted {value}")
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    """`ethtool -C` per NIC. Where adaptive-rx ends up on and a number changes, two calls:
    the numbers with adaptive-rx off, then adaptive-rx on — Intel i40e/ice/iavf refuse
    (EINVAL) any rx-usecs change in a request that leaves adaptive-rx on, and adaptive-rx
    on with rx-usecs 50 is their default, so a restore in one call failed."""
    out: list[str] = []
    for nic in dict.fromkeys(split_key(key)[0] for key in values):
        mine = {k: v for k, v in values.items() if split_key(k)[0] == nic}
        adaptive = nic_key(nic, NAME, "adaptive-rx")
        if _adaptive_after(ctx, nic, mine) and set(mine) - {adaptive}:
            out += ethtool_commands(ctx, {**mine, adaptive: False}, "-C")
            mine = {adaptive: True}
        out += ethtool_commands(ctx, mine, "-C")
    return out


def _adaptive_after(ctx: HostContext, nic: str, values: dict[str, Any]) -> bool:
    """Whether adaptive-rx is on once `values` are set (the host's value if not among
    them)."""
    key = nic_key(nic, NAME, "adaptive-rx")
    if key in values:
        return values[key] is True
    return (ctx.nic(nic).coalesce or {}).get("adaptive-rx") is True
