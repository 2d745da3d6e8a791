"""Offload features (`ethtool -K`): GRO is switched on where the NAPI knobs carry the
setting (passive_wait's gro_flush_timeout only acts with GRO; on veth, GRO also turns
NAPI on) and for busy_poll (needs NAPI); otherwise GRO keeps its original state."""

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


def read(probe: HostProbe) -> dict[str, Any]:
    out = {}
    for nic_id, nic in probe.nics.items():
        for feature in FEATURES:
            state = (nic.features or {}).get(feature)
            if state is not None and not state.get("fixed"):
                out[nic_key(nic_id, NAME, feature)] = bool(state["active"])
    return out


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "nic/").items() if split_key(k)[1] == NAME}
    notes: list[Note] = []
    for nic, s in ctx.settings.items():
        if s.mode not in ("passive_wait", "busy_poll"):
            continue
        ctx.want(targets, notes, nic, NAME, "generic-receive-offload", True,
                 f"GRO cannot be changed on {ctx.nic(nic).iface} (fixed or absent)")
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    return ethtool_commands(ctx, values, "-K", FEATURES.__getitem__)
