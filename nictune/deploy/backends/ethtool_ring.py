"""RX ring size (`ethtool -G rx N`): the setting's ring_slots, clamped to the NIC's maximum
(reported). Drivers may round (to a multiple of 8, a power of two): the read-back is
accepted within that rounding and reported. A NIC without ring control (veth) is reported
`unsupported`; PF_RING's min_num_slots and the capture profile carry ring_slots."""

from __future__ import annotations

from typing import Any

from nictune.deploy.backends import (
    HostContext,
    Note,
    ethtool_commands,
    nic_key,
    originals,
    split_key,
)
from nictune.deploy.parsers import is_int, is_u32
from nictune.deploy.probe import HostProbe

NAME = "ring"
MGMT_GUARDED = True  # changes on the SSH interface need --allow-mgmt-iface


def valid(knob: str, value: Any) -> bool:
    nic, _, param = split_key(knob)
    return bool(nic) and param == "rx" and is_u32(value)


def read(probe: HostProbe) -> dict[str, Any]:
    out = {}
    for nic_id, nic in probe.nics.items():
        rx = ((nic.ring or {}).get("current") or {}).get("rx")
        if is_int(rx):
            out[nic_key(nic_id, NAME, "rx")] = rx
    return out


def matches(key: str, want: Any, got: Any, exact: bool = False) -> bool:
    """Equal, or within the driver's rounding (next power of two / multiple of 8) of a
    planned size. A size read from the host (`exact`: a snapshot's) is held as it is, so
    a ring left at 16384 does not pass for its original 9709."""
    if exact or not isinstance(want, int) or not isinstance(got, int):
        return want == got
    return abs(got - want) < 8 or want < got < 2 * want


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "nic/").items() if split_key(k)[1] == NAME}
    notes: list[Note] = []
    for nic, s in ctx.settings.items():
        key = nic_key(nic, NAME, "rx")
        probe = ctx.nic(nic)
        if key not in ctx.original:
            notes.append(ctx.note(nic, NAME, "unsupported",
                                  f"{probe.iface} has no settable RX ring "
                                  f"({probe.errors.get('g', 'no current RX size')})",
                                  f"PF_RING min_num_slots and capture profile ring_slots="
                                  f"{s.ring_slots}"))
            continue
        high = ((probe.ring or {}).get("max") or {}).get("rx")
        want = s.ring_slots
        if isinstance(high, int) and high > 0 and want > high:
            notes.append(ctx.note(nic, NAME, "clamped",
                                  f"ring_slots {want} -> {high} (the NIC's maximum)"))
            want = high
        targets[key] = want
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    return ethtool_commands(ctx, values, "-G")
