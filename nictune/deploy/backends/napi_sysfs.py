"""Kernel software interrupt moderation per device (DESIGN §2): `gro_flush_timeout` (ns)
and `napi_defer_hard_irqs` in /sys/class/net/IFACE.

active_wait 0/0; passive_wait T/DEFER_HARD_IRQS; watermark is not expressible (reported,
original values kept); busy_poll keeps the original values. On NICs without hardware
coalescing (veth) these knobs carry the setting, but veth's NAPI sees only some of its
packets: a passive_wait veth gets a warning saying which (`veth_bypass`).
"""

from __future__ import annotations

import shlex
from typing import Any

from nictune.deploy.backends import (
    DEFER_HARD_IRQS,
    HostContext,
    Note,
    default_matches,
    nic_key,
    originals,
    split_key,
)
from nictune.deploy.parsers import is_int
from nictune.deploy.probe import HostProbe, NicProbe

NAME = "napi"
# the largest value each takes: an unsigned long (ns) and an int the kernel keeps ≥ 0
PARAMS = {"gro_flush_timeout": 2**64 - 1, "napi_defer_hard_irqs": 2**31 - 1}
matches = default_matches
# veth features that send a local socket's packets through veth's NAPI from a TSO peer
VETH_NAPI_FEATURES = ("rx-udp-gro-forwarding", "rx-gro-list")


def valid(knob: str, value: Any) -> bool:
    nic, _, param = split_key(knob)
    return bool(nic) and param in PARAMS and is_int(value) and 0 <= value <= PARAMS[param]


def read(probe: HostProbe) -> dict[str, Any]:
    return {nic_key(n, NAME, p): v for n, nic in probe.nics.items()
            for p, v in nic.napi.items() if v is not None}


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "nic/").items() if split_key(k)[1] == NAME}
    notes: list[Note] = []
    for nic, s in ctx.settings.items():
        if s.mode == "active_wait":
            want = {"gro_flush_timeout": 0, "napi_defer_hard_irqs": 0}
        elif s.mode == "passive_wait":
            ns = round((s.poll_interval or 0.0) * 1e9)
            want = {"gro_flush_timeout": ns, "napi_defer_hard_irqs": DEFER_HARD_IRQS}
        else:
            if s.mode == "watermark":
                notes.append(ctx.note(nic, NAME, "not_expressible",
                                      "kernel software moderation has no packet-count "
                                      "watermark; gro_flush_timeout/napi_defer_hard_irqs kept "
                                      "at their original values"))
            continue
        for param, value in want.items():
            ctx.want(targets, notes, nic, NAME, param, value,
                     f"/sys/class/net/{ctx.nic(nic).iface}/{param} is missing "
                     "(kernel too old?)")
        if s.mode == "passive_wait" and ctx.nic(nic).driver == "veth":
            notes.append(ctx.note(nic, NAME, "warning", veth_bypass(ctx.nic(nic))))
    return targets, notes


def veth_bypass(nic: NicProbe) -> str:
    """Why the knobs may not act on a veth: its NAPI (on with GRO) takes only packets
    from a peer without TSO, or from a local socket when rx-udp-gro-forwarding or
    rx-gro-list is on here; the rest go to the CPU's backlog, which the knobs do not
    defer (measured on Linux 6.18: docs/deploy.md, "On veth")."""
    on = [f for f in VETH_NAPI_FEATURES if ((nic.features or {}).get(f) or {}).get("active")]
    return ("veth: gro_flush_timeout/napi_defer_hard_irqs act only on packets veth's NAPI "
            "takes: from a peer with TSO off, or from a local socket when "
            "rx-udp-gro-forwarding or rx-gro-list is on here (" +
            (f"{' and '.join(on)} on" if on else "both off: a peer with TSO on, veth's "
             "default, bypasses them") + ")")


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    out = []
    for key, value in values.items():
        nic, _, param = split_key(key)
        path = f"/sys/class/net/{ctx.host.iface(nic)}/{param}"
        out.append(f"echo {int(value)} > {shlex.quote(path)}")
    return out
