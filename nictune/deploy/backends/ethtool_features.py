"""Offload features (`ethtool -K`): GRO is switched on where the NAPI knobs carry the
setting (passive_wait's gro_flush_timeout only acts with GRO; on veth, GRO also turns
NAPI on, for the packets it takes: napi_sysfs.veth_bypass) and for busy_poll (needs
NAPI); otherwise GRO keeps its original state. A GRO whose active state is not the
requested one (`off [requested on]`: another feature holds it) is left alone: `ethtool
-K` would change only the request, and a restore would put back the wrong one."""

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
from nictune.deploy.probe import HostProbe

NAME = "features"
FEATURES = {"generic-receive-offload": "gro"}  # ethtool -k name -> ethtool -K name
matches = default_matches


def valid(knob: str, value: Any) -> bool:
    nic, _, param = split_key(knob)
    return bool(nic) and param in FEATURES and isinstance(value, bool)


def read(probe: HostProbe) -> dict[str, Any]:
    out = {}
    for nic_id, nic in probe.nics.items():
        for feature in FEATURES:
            state = (nic.features or {}).get(feature)
            if state is None or state.get("fixed"):
                continue
            if state.get("requested") not in (None, state["active"]):
                continue  # `off [requested on]`: held by another feature, not settable
            out[nic_key(nic_id, NAME, feature)] = bool(state["active"])
    return out


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "nic/").items() if split_key(k)[1] == NAME}
    notes: list[Note] = []
    for nic, s in ctx.settings.items():
        if s.mode not in ("passive_wait", "busy_poll"):
            continue
        ctx.want(targets, notes, nic, NAME, "generic-receive-offload", True,
                 f"GRO cannot be changed on {ctx.nic(nic).iface} (fixed, absent, or "
                 "held by another feature: its active state differs from the requested)")
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    return ethtool_commands(ctx, values, "-K", FEATURES.__getitem__)
