"""IRQ affinity: every IRQ line of the NIC goes to the setting's irq_core
(/proc/irq/N/smp_affinity_list). A NIC without IRQ lines (veth) is reported `unsupported`
and RPS (/sys/class/net/IFACE/queues/rx-*/rps_cpus) steers its receive processing to the
core instead. A running irqbalance would undo the affinity: reported as a warning."""

from __future__ import annotations

import re
import shlex
from typing import Any

from nictune.deploy import parsers
from nictune.deploy.backends import HostContext, Note, nic_key, originals, split_key
from nictune.deploy.probe import HostProbe

NAME = "irq"
RPS = "rps"
NAMES = (NAME, RPS)  # (the two kinds of key this backend sets)


def valid(knob: str, value: Any) -> bool:
    """`nic/ID/irq/N`: a CPU list; `nic/ID/rps/rx-N`: a CPU mask (an integer)."""
    nic, name, param = split_key(knob)
    if not nic:
        return False
    if name == RPS:
        return (re.fullmatch(r"rx-[0-9]+", param) is not None and parsers.is_int(value)
                and 0 <= value < 2**parsers.MAX_CPUS)
    if not (name == NAME and parsers.is_count(param) and isinstance(value, str)):
        return False
    try:
        return bool(parsers.cpu_list(value))
    except parsers.ParseError:
        return False


def read(probe: HostProbe) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for nic_id, nic in probe.nics.items():
        for irq, cpus in nic.irq_affinity.items():
            if cpus:
                out[nic_key(nic_id, NAME, str(irq))] = cpus
        for queue, mask in nic.rps_cpus.items():
            out[nic_key(nic_id, RPS, queue)] = mask
    return out


def matches(key: str, want: Any, got: Any, exact: bool = False) -> bool:
    if split_key(key)[1] == NAME and isinstance(want, str) and isinstance(got, str):
        return parsers.cpu_list(want) == parsers.cpu_list(got)
    return want == got


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "nic/").items()
               if split_key(k)[1] in (NAME, RPS)}
    notes: list[Note] = []
    if ctx.settings and ctx.probe.irqbalance:
        notes.append(ctx.note("", NAME, "warning", "irqbalance is running and may move the "
                                                   "IRQs again; stop it to keep the affinity"))
    for nic, s in ctx.settings.items():
        core = s.irq_core
        if core >= ctx.probe.cpus:
            notes.append(ctx.note(nic, NAME, "clamped", f"irq_core {core} -> "
                                  f"{ctx.probe.cpus - 1} (the host has {ctx.probe.cpus} CPUs)"))
            core = ctx.probe.cpus - 1
        irqs = [k for k in targets if k.startswith(f"nic/{nic}/{NAME}/")]
        if irqs:
            for key in irqs:
                targets[key] = str(core)
            continue
        # every RX queue (channels keeps them all): one left out would steer elsewhere
        queues = [k for k in targets if k.startswith(f"nic/{nic}/{RPS}/")]
        notes.append(ctx.note(nic, NAME, "unsupported",
                              f"{ctx.nic(nic).iface} has no IRQ lines",
                              f"RPS steers receive processing to CPU {core}" if queues
                              else "none (no RPS queues either)"))
        for key in queues:
            targets[key] = 1 << core
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    out = []
    for key, value in values.items():
        nic, kind, param = split_key(key)
        if kind == NAME:
            out.append(f"echo {shlex.quote(str(value))} > /proc/irq/{int(param)}/"
                       "smp_affinity_list")
        else:
            path = f"/sys/class/net/{ctx.host.iface(nic)}/queues/{param}/rps_cpus"
            if not param.startswith("rx-") or not param[3:].isdigit():
                raise ValueError(f"bad queue name {param!r}")
            out.append(f"echo {rps_mask(int(value))} > {shlex.quote(path)}")
    return out


def rps_mask(mask: int) -> str:
    """`mask` as the kernel's bitmap_parse takes it: comma-separated 32-bit hex groups,
    most significant first (CPU 40 alone: `100,00000000`); more than 8 hex digits in one
    group is EOVERFLOW, so a plain `%x` fails from CPU 32 on."""
    if mask < 0:
        raise ValueError(f"bad CPU mask {mask}")
    groups = [f"{mask >> shift & 0xFFFFFFFF:08x}"
              for shift in range(32 * (max(mask.bit_length() - 1, 0) // 32), -1, -32)]
    return ",".join([groups[0].lstrip("0") or "0", *groups[1:]])
