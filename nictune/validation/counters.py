"""Receiver counters: parse the raw snapshots the agent takes and compute deltas.

Sources: the NIC's lines in `/proc/interrupts` (matched by interface name, or by IRQ
numbers), NET_RX in `/proc/softirqs`, `/proc/stat` (CPU jiffies, all interrupts, context
switches), the interface's line in `/proc/net/dev`, and `ethtool -S`. A veth has no IRQ
lines: its interrupts are reported as absent (None), not as zero; NET_RX and
/proc/stat are system-wide, so other work on the host shows up in them (said in the
report).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from nictune.deploy.parsers import is_count

NET_DEV_FIELDS = ("rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame")
_DROP_KEY = re.compile(r"drop|miss|no_buf|nobuf|fifo|discard|overrun", re.I)


def parse_interrupts(text: str, iface: str, irqs: tuple[str, ...] = ()) -> dict[str, int] | None:
    """Total per IRQ line of the NIC (summed over CPUs); None if the NIC has no lines."""
    lines = text.splitlines()
    if not lines:
        return None
    ncpu = len(lines[0].split())
    name = re.compile(rf"(^|[\s:@-]){re.escape(iface)}($|[\s:@-])")
    out: dict[str, int] = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        irq = head.strip()
        fields = rest.split()
        counts = [int(x) for x in fields[:ncpu] if is_count(x)]
        label = " ".join(fields[len(counts):])
        if irq in irqs or (not irqs and name.search(label) and is_count(irq)):
            out[irq] = sum(counts)
    return out or None


def parse_softirqs(text: str, kind: str = "NET_RX") -> int:
    """The `kind` row of /proc/softirqs, summed over CPUs (0 if absent)."""
    for line in text.splitlines():
        head, _, rest = line.partition(":")
        if head.strip() == kind:
            return sum(int(x) for x in rest.split())
    return 0


def parse_stat(text: str) -> dict[str, int]:
    """/proc/stat: CPU jiffies by kind (aggregate line), total interrupts, context switches."""
    out: dict[str, int] = {}
    kinds = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            out.update({f"cpu_{k}": int(v) for k, v in zip(kinds, parts[1:], strict=False)})
        elif parts[0] == "intr" and len(parts) > 1:
            out["intr"] = int(parts[1])
        elif parts[0] == "ctxt":
            out["ctxt"] = int(parts[1])
    return out


def parse_net_dev(text: str, iface: str) -> dict[str, int] | None:
    """The interface's receive counters from /proc/net/dev (None if it is not listed)."""
    for line in text.splitlines():
        head, sep, rest = line.partition(":")
        if sep and head.strip() == iface:
            values = [int(x) for x in rest.split()]
            return dict(zip(NET_DEV_FIELDS, values, strict=False))
    return None


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """`ethtool -S` as a mapping of counter name to value (numeric counters only)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().rpartition(":")
        value = value.strip()
        if sep and key and is_count(value.lstrip("-")):
            out[key.strip()] = int(value)
    return out


@dataclass(frozen=True)
class CounterDelta:
    """What changed on the receiver during one capture."""

    nic_interrupts: int | None  # None: the NIC has no IRQ lines (veth)
    net_rx_softirqs: int  # system-wide
    host_interrupts: int  # all interrupts, system-wide (/proc/stat intr)
    context_switches: int  # system-wide (/proc/stat ctxt)
    cpu_softirq_s: float
    cpu_busy_s: float  # all non-idle CPU time on the host
    rx_packets: int | None
    rx_bytes: int | None
    rx_drop: int | None  # /proc/net/dev rx drop + fifo
    nic_drops: int | None  # sum of ethtool -S counters that name drops/misses
    ethtool: dict[str, int]  # every ethtool -S counter that changed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def delta(before: dict[str, str], after: dict[str, str], iface: str, hz: int = 100,
          irqs: tuple[str, ...] = ()) -> CounterDelta:
    """Counter deltas between two snapshots `{source: raw text}` taken by the agent."""
    i0 = parse_interrupts(before.get("/proc/interrupts", ""), iface, irqs)
    i1 = parse_interrupts(after.get("/proc/interrupts", ""), iface, irqs)
    nic_irq = None if i0 is None or i1 is None else sum(i1.values()) - sum(i0.values())
    s0 = parse_stat(before.get("/proc/stat", ""))
    s1 = parse_stat(after.get("/proc/stat", ""))

    def stat(key: str) -> int:
        return s1.get(key, 0) - s0.get(key, 0)

    busy = sum(stat(f"cpu_{k}") for k in ("user", "nice", "system", "irq", "softirq", "steal"))
    d0 = parse_net_dev(before.get("/proc/net/dev", ""), iface)
    d1 = parse_net_dev(after.get("/proc/net/dev", ""), iface)
    e0 = parse_ethtool_stats(before.get("ethtool -S", ""))
    e1 = parse_ethtool_stats(after.get("ethtool -S", ""))
    changed = {k: v - e0.get(k, 0) for k, v in e1.items() if v != e0.get(k, 0)}
    drop_keys = [k for k in e1 if _DROP_KEY.search(k)]
    return CounterDelta(
        nic_interrupts=nic_irq,
        net_rx_softirqs=parse_softirqs(after.get("/proc/softirqs", ""))
        - parse_softirqs(before.get("/proc/softirqs", "")),
        host_interrupts=stat("intr"),
        context_switches=stat("ctxt"),
        cpu_softirq_s=stat("cpu_softirq") / hz,
        cpu_busy_s=busy / hz,
        rx_packets=None if d0 is None or d1 is None else d1["rx_packets"] - d0["rx_packets"],
        rx_bytes=None if d0 is None or d1 is None else d1["rx_bytes"] - d0["rx_bytes"],
        rx_drop=None if d0 is None or d1 is None else (
            d1["rx_drop"] + d1["rx_fifo"] - d0["rx_drop"] - d0["rx_fifo"]),
        nic_drops=sum(e1[k] - e0.get(k, 0) for k in drop_keys) if drop_keys else None,
        ethtool=changed,
    )
