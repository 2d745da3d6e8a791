"""Receiver counters: parse the raw snapshots the agent takes and compute deltas.

Sources: the NIC's lines in `/proc/interrupts` (matched by interface name, or by IRQ
numbers), NET_RX in `/proc/softirqs`, `/proc/stat` (CPU jiffies, all interrupts, context
switches), the interface's line in `/proc/net/dev`, and `ethtool -S`. A veth has no IRQ
lines: its interrupts are reported as absent (None), not as zero; NET_RX and
/proc/stat are system-wide, so other work on the host shows up in them (said in the
report). Per-CPU IRQ and softirq counts are 32-bit and wrap: deltas are taken per CPU,
modulo 2**32. A snapshot that is malformed where it is read (a value that is no count, a
truncated line) raises RunError naming the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from nictune.deploy.parsers import count, cpu_columns, is_count
from nictune.errors import RunError

NET_DEV_FIELDS = ("rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame")
NET_DEV_COLUMNS = 16  # receive and transmit counters of one /proc/net/dev line
WRAP = 2 ** 32  # per-CPU IRQ and softirq counts are unsigned int in the kernel
# ethtool -S names of drop counters (rx_no_buffer_count is no drop: e1000e/igb still
# receive the packet when their FIFO has room) and the first rx/tx word of a name
_DROP_KEY = re.compile(r"drop|discard|miss|fifo|overrun|out_of_buffer", re.I)
_DIRECTION = re.compile(r"(?:^|[._-])([rt]x)\d*(?=$|[._-])", re.I)


def _count(token: str, where: str) -> int:
    """A counter's value; anything else is a malformed snapshot (a one-line RunError)."""
    return count(token, where, RunError)


def _increase(after: list[int], before: list[int]) -> int:
    """Sum of per-CPU increases of 32-bit counters: one that wrapped still counts up."""
    before = before + [0] * (len(after) - len(before))  # a line or CPU new since `before`
    return sum((a - b) % WRAP for a, b in zip(after, before, strict=False))


def parse_interrupts(text: str, iface: str,
                     irqs: tuple[str, ...] = ()) -> dict[str, list[int]] | None:
    """Per-CPU counts of each IRQ line of the NIC; None if the NIC has no lines."""
    lines = text.splitlines()
    ncpu = cpu_columns(lines[0]) if lines else None
    name = re.compile(rf"(^|[\s:@-]){re.escape(iface)}($|[\s:@-])")
    out: dict[str, list[int]] = {}
    for line in lines:
        head, sep, rest = line.partition(":")
        irq, fields = head.strip(), rest.split()
        n = 0
        while n < len(fields) and n != ncpu and is_count(fields[n]):
            n += 1
        label = " ".join(fields[n:])
        if sep and (irq in irqs or (not irqs and name.search(label) and is_count(irq))):
            if ncpu is not None and n != ncpu:
                raise RunError(f"/proc/interrupts: IRQ {irq}: {n} of {ncpu} CPU counts")
            out[irq] = [int(x) for x in fields[:n]]
    return out or None


def parse_softirqs(text: str, kind: str = "NET_RX") -> list[int]:
    """The per-CPU counts of the `kind` row of /proc/softirqs ([] if absent)."""
    lines = text.splitlines()
    ncpu = cpu_columns(lines[0]) if lines else None
    for line in lines:
        head, _, rest = line.partition(":")
        if head.strip() == kind:
            counts = [_count(x, f"/proc/softirqs: {kind}") for x in rest.split()]
            if ncpu is not None and len(counts) != ncpu:
                raise RunError(f"/proc/softirqs: {kind}: {len(counts)} of {ncpu} CPU counts")
            return counts
    return []


def _stat_value(parts: list[str]) -> int:
    if len(parts) < 2:
        raise RunError(f"/proc/stat: {parts[0]}: no value")
    return _count(parts[1], f"/proc/stat: {parts[0]}")


def parse_stat(text: str) -> dict[str, int]:
    """/proc/stat: CPU jiffies by kind (aggregate line), total interrupts, context switches."""
    out: dict[str, int] = {}
    kinds = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            out.update({f"cpu_{k}": _count(v, "/proc/stat: cpu")
                        for k, v in zip(kinds, parts[1:], strict=False)})
        elif parts[0] in ("intr", "ctxt"):
            out[parts[0]] = _stat_value(parts)
    return out


def parse_net_dev(text: str, iface: str) -> dict[str, int] | None:
    """The interface's receive counters from /proc/net/dev (None if it is not listed)."""
    for line in text.splitlines():
        head, sep, rest = line.partition(":")
        if sep and head.strip() == iface:
            fields = rest.split()
            if len(fields) < NET_DEV_COLUMNS:
                raise RunError(f"/proc/net/dev: {iface}: {len(fields)} counters, expected "
                               f"{NET_DEV_COLUMNS}")
            values = [_count(x, f"/proc/net/dev: {iface}") for x in fields]
            return dict(zip(NET_DEV_FIELDS, values, strict=False))
    return None


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """`ethtool -S` as a mapping of counter name to value (numeric counters only)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().rpartition(":")
        value = value.strip()
        if sep and key and is_count(value):
            out[key.strip()] = int(value)
    return out


def _rx_drop_key(key: str) -> bool:
    """A receive-drop counter: it names a drop and its first rx/tx word is rx
    (`rx_xdp_tx_drops` is one, `tx_xdp_tx_drops` and `fdir_miss` are not)."""
    direction = _DIRECTION.search(key)
    return bool(direction and direction.group(1).lower() == "rx" and _DROP_KEY.search(key))


def nic_drops(increases: dict[str, int]) -> int | None:
    """The largest increase among the `ethtool -S` receive-drop counters (None: none).

    Drivers repeat one drop in several counters (rx_drops and rx0_drops; rx_fifo_errors
    and every rx_queue_N_drops; the netdev counters of /proc/net/dev), so they are not
    added. Aggregates are preferred; per-queue counters (a number in the name) count,
    summed over the queues, only where the driver has no aggregate."""
    kinds: dict[str, int] = {}
    for key, value in increases.items():
        if _rx_drop_key(key):
            kind = re.sub(r"\d+", "#", key)
            kinds[kind] = kinds.get(kind, 0) + value
    aggregates = [v for k, v in kinds.items() if "#" not in k]
    return max(aggregates or kinds.values()) if kinds else None


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
    nic_drops: int | None  # the largest ethtool -S receive-drop counter (see nic_drops)
    # drops before the capture ring, each counted once: the larger of rx_drop and
    # nic_drops (both views count the same drops in most drivers)
    drops_before_ring: int | None
    ethtool: dict[str, int]  # every ethtool -S counter that changed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# sources every Linux host has: the agent read nothing there (an error, a hardened
# container), and their counts came out as measured zeros
REQUIRED = ("/proc/interrupts", "/proc/softirqs", "/proc/stat")


def delta(before: dict[str, str], after: dict[str, str], iface: str, hz: int = 100,
          irqs: tuple[str, ...] = ()) -> CounterDelta:
    """Counter deltas between two snapshots `{source: raw text}` taken by the agent."""
    for source in REQUIRED:
        if not (before.get(source, "").strip() and after.get(source, "").strip()):
            raise RunError(f"{source} could not be read on the receiver (the agent got "
                           "nothing): its counts are unknown, not zero")
    i0 = parse_interrupts(before.get("/proc/interrupts", ""), iface, irqs)
    i1 = parse_interrupts(after.get("/proc/interrupts", ""), iface, irqs)
    nic_irq = None if i0 is None or i1 is None else sum(
        _increase(counts, i0.get(irq, [])) for irq, counts in i1.items())
    s0 = parse_stat(before.get("/proc/stat", ""))
    s1 = parse_stat(after.get("/proc/stat", ""))

    def stat(key: str) -> int:
        return s1.get(key, 0) - s0.get(key, 0)

    busy = sum(stat(f"cpu_{k}") for k in ("user", "nice", "system", "irq", "softirq", "steal"))
    d0 = parse_net_dev(before.get("/proc/net/dev", ""), iface)
    d1 = parse_net_dev(after.get("/proc/net/dev", ""), iface)
    e0 = parse_ethtool_stats(before.get("ethtool -S", ""))
    e1 = parse_ethtool_stats(after.get("ethtool -S", ""))
    increases = {k: v - e0.get(k, 0) for k, v in e1.items()}
    rx_drop = None if d0 is None or d1 is None else (
        d1["rx_drop"] + d1["rx_fifo"] - d0["rx_drop"] - d0["rx_fifo"])
    nic = nic_drops(increases)
    seen = [x for x in (rx_drop, nic) if x is not None]
    return CounterDelta(
        nic_interrupts=nic_irq,
        net_rx_softirqs=_increase(parse_softirqs(after.get("/proc/softirqs", "")),
                                  parse_softirqs(before.get("/proc/softirqs", ""))),
        host_interrupts=stat("intr"),
        context_switches=stat("ctxt"),
        cpu_softirq_s=stat("cpu_softirq") / hz,
        cpu_busy_s=busy / hz,
        rx_packets=None if d0 is None or d1 is None else d1["rx_packets"] - d0["rx_packets"],
        rx_bytes=None if d0 is None or d1 is None else d1["rx_bytes"] - d0["rx_bytes"],
        rx_drop=rx_drop,
        nic_drops=nic,
        drops_before_ring=max(seen) if seen else None,
        ethtool={k: v for k, v in increases.items() if v},
    )
