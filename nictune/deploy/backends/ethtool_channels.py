"""Queue count (`ethtool -L`): read, snapshotted and restored, but never changed by a plan.

The model runs all of a NIC's receive work on its irq_core (DESIGN §3); irq_affinity
realises that by pinning every queue's IRQ to that core, so the NIC keeps its RX queues
(RSS, and the flow spreading a data-centre node relies on). Keeping several queues where
the model assumes one is reported as an approximation. A NIC without channel control is
reported `unsupported`."""

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

NAME = "channels"
MGMT_GUARDED = True
matches = default_matches


def _field(channels: dict[str, dict[str, Any]] | None) -> str | None:
    """`combined` when the NIC has combined queues, else `rx`, else None."""
    current = (channels or {}).get("current") or {}
    high = (channels or {}).get("max") or {}
    for name in ("combined", "rx"):
        now, most = current.get(name), high.get(name)
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (now, most)):
            return name
    return None


def valid(knob: str, value: Any) -> bool:
    nic, _, param = split_key(knob)
    return bool(nic) and param in ("combined", "rx") and is_u32(value) and value > 0


def read(probe: HostProbe) -> dict[str, Any]:
    out = {}
    for nic_id, nic in probe.nics.items():
        name = _field(nic.channels)
        if name is not None:
            out[nic_key(nic_id, NAME, name)] = nic.channels["current"][name]  # type: ignore
    return out


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "nic/").items() if split_key(k)[1] == NAME}
    notes: list[Note] = []
    for nic in ctx.settings:
        keys = [k for k in targets if k.startswith(f"nic/{nic}/{NAME}/")]
        if not keys:
            notes.append(ctx.note(nic, NAME, "unsupported",
                                  f"{ctx.nic(nic).iface} has no settable RX queue count",
                                  "irq_affinity/RPS steer every queue to irq_core"))
            continue
        queues = max(int(targets[k]) for k in keys)
        if queues > 1:
            notes.append(ctx.note(nic, NAME, "approximation",
                                  f"{ctx.nic(nic).iface} keeps its {queues} RX queues (RSS); "
                                  "the model's single IRQ core is realised by pinning every "
                                  "queue's IRQ to it"))
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    return ethtool_commands(ctx, values, "-L")
