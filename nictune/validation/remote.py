"""One measured run on real hosts: ship the agent, start it, send with hping3, collect.

Used by the A/B runner and by calibration. The receiver's connection runs the agent (as
root: AF_PACKET needs CAP_NET_RAW; `sudo: true` hosts use `sudo -n`), the sender's runs
hping3. Nothing here changes NIC settings: that is the deployer's job.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import re
import secrets
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nictune.deploy.inventory import HostInventory
from nictune.deploy.parsers import is_count
from nictune.deploy.probe import probe_host
from nictune.deploy.transport import Connection
from nictune.errors import RunError
from nictune.units import is_finite_number
from nictune.validation import agent, counters, pfring, traffic

AGENT_DIR_PREFIX = "nictune-validate."  # + 6 random characters, under /tmp
AGENT_FILES = (Path(agent.__file__), Path(pfring.__file__))


@dataclass
class Receiver:
    """The receiving side of one transmission: its connection, interface and address."""

    conn: Connection
    host: HostInventory
    iface: str
    address: str
    hz: int
    directory: str
    irqs: tuple[str, ...]  # the NIC's IRQ lines, as the probe finds them (none: a veth)

    @classmethod
    def prepare(cls, conn: Connection, host: HostInventory, iface: str) -> Receiver:
        """Ship agent.py + pfring.py into a fresh private directory, find the interface's
        IPv4 address and its IRQ lines (the probe's: its msi_irqs, else by handler name,
        bus address or device — virtio0-input.0, mlx5_comp0@pci:…, which the interface's
        name alone misses). Use as a context manager: the directory is deleted at its
        end."""
        directory = _private_directory(conn, host)
        try:
            for path in AGENT_FILES:
                conn.put(str(path), f"{directory}/{path.name}")
            res = conn.run(["ip", "-4", "-o", "addr", "show", "dev", iface])
            try:
                address = ipv4_address(res.stdout) if res.ok else ""
            except RunError as exc:
                raise RunError(f"{host.name}: interface {iface}: {exc}") from None
            if not address:
                raise RunError(f"{host.name}: interface {iface} has no IPv4 address to send "
                               f"to ({res.error_line() if not res.ok else 'ip addr shows none'})")
            hz = conn.run(["getconf", "CLK_TCK"]).stdout.strip()
            nic = next((n for n in probe_host(conn).nics.values() if n.iface == iface), None)
        except BaseException:
            _stop(conn, shlex.join(["rm", "-rf", directory]))
            raise
        irqs = tuple(str(irq) for irq in sorted(nic.irqs)) if nic is not None else ()
        return cls(conn, host, iface, address, int(hz) if is_count(hz) else 100, directory,
                   irqs)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        """Delete the agent's directory, over a new session if the run lost its own (best
        effort: the host may be unreachable; the session is then left closed)."""
        with contextlib.suppress(RunError):
            self.conn.reconnect_if_lost()
        _stop(self.conn, shlex.join(["rm", "-rf", self.directory]))


def ipv4_address(ip_addr: str) -> str:
    """The first address `ip -4 -o addr show` lists ('' if none). It goes to hping3 on the
    sender, where anything but an address could be an option: RunError if it is not one."""
    for line in ip_addr.splitlines():
        words = line.split()
        for before, word in itertools.pairwise(words):
            if before == "inet":
                try:
                    return str(ipaddress.IPv4Address(word.split("/")[0]))
                except ValueError:
                    raise RunError(f"ip addr shows {word[:40]!r} as an IPv4 address") from None
    return ""


def _private_directory(conn: Connection, host: HostInventory) -> str:
    """A new directory only the login user can write (`mktemp -d`, as that user: the files
    are copied as the login user, and the agent in it runs as root)."""
    parent = host.remote_path("/tmp")
    conn.run(["mkdir", "-p", parent], sudo=False, check=True)
    res = conn.run(["mktemp", "-d", f"{parent}/{AGENT_DIR_PREFIX}XXXXXX"], sudo=False,
                   check=True)
    directory = res.stdout.strip()
    if not re.fullmatch(re.escape(f"{parent}/{AGENT_DIR_PREFIX}") + r"[A-Za-z0-9]{6}",
                        directory):
        raise RunError(f"{host.name}: mktemp -d printed {directory[:80]!r}, not a directory "
                       f"under {parent}")
    return directory


def _wait_for(conn: Connection, path: str, seconds: float, what: str,
              also: str = "") -> None:
    """Poll until `path` (or `also`: the agent's result, written early on failure) exists."""
    deadline = time.monotonic() + seconds
    test = f"test -e {shlex.quote(path)}" + (f" || test -e {shlex.quote(also)}" if also else "")
    while conn.run(test).rc != 0:
        if time.monotonic() > deadline:
            log = conn.run(f"tail -3 {shlex.quote(also or path)}.log 2>/dev/null").stdout
            raise RunError(f"{conn.host.name}: {what} not seen within {seconds:g} s "
                           f"{log.strip()}")
        time.sleep(0.05)


def _stop(conn: Connection, command: str) -> None:
    """Run a clean-up command if the session still works; never raise over the real error."""
    if conn.connected:
        with contextlib.suppress(RunError):
            conn.run(command, timeout=10)


def stop_agent_command(ready: str) -> str:
    """Stop the agent whose pid is in its `ready` file, and remove the file. Only digits
    without a leading 0, and not 1, are the agent's pid: `-l` would be an option of kill,
    `-1` (even after `--`) every process there is, `0` the caller's process group, `1`
    init."""
    path = shlex.quote(ready)
    return (f"p=$(cat {path} 2>/dev/null); case $p in ''|0*|1|*[!0-9]*) ;; "
            f"*) kill \"$p\" 2>/dev/null;; esac; rm -f {path}")


def measure(rx: Receiver, sender: Connection, spec: traffic.TrafficSpec,
            agent_args: list[str], tag: str) -> dict[str, Any]:
    """Start the agent, run hping3, wait for the agent's JSON; one run's raw results.

    If anything fails or is interrupted on the way, the agent and hping3 are stopped
    before the error goes on (best effort: a lost session cannot stop them)."""
    base = f"{rx.directory}/{tag}"
    ready, out = f"{base}.ready", f"{base}.json"
    limit = traffic.time_limit(spec)
    pidfile = f"/tmp/nictune-hping3-{secrets.token_hex(8)}.pid"
    argv = ["python3", f"{rx.directory}/agent.py", "--iface", rx.iface, "--port",
            str(spec.port), "--packet-size", str(spec.packet_size), "--ready-file", ready,
            "--out", out, "--start-timeout", f"{min(limit + 60, 120):g}", *agent_args]
    if spec.count:
        argv += ["--count", str(spec.count)]
    rx.conn.run(f"rm -f {shlex.quote(ready)} {shlex.quote(out)}; nohup {shlex.join(argv)} "
                f"> {shlex.quote(out + '.log')} 2>&1 < /dev/null &", check=True)
    try:
        _wait_for(rx.conn, ready, 30, "the agent's ready file", also=out)
        # the ssh command outlives `timeout`'s limit, so hping3 is stopped there first
        res = sender.run(traffic.hping3_command(spec, pidfile), timeout=limit + 30)
        sent = traffic.parse_hping3(res.stdout, res.stderr, res.rc, spec)
        _wait_for(rx.conn, out, limit + 60, "the agent's result")
    except BaseException:
        _stop(sender, traffic.stop_command(pidfile))
        # this run's agent: its pid is in the ready file
        _stop(rx.conn, stop_agent_command(ready))
        raise
    text = rx.conn.read_file(out, missing_ok=False) or ""
    rx.conn.run(["rm", "-f", ready, out, out + ".log"])
    result = agent_result(rx.host.name, text)
    try:
        delta = counters.delta(result.pop("counters_before"), result.pop("counters_after"),
                               rx.iface, hz=rx.hz, irqs=rx.irqs)
    except RunError as exc:  # a garbled /proc snapshot: say which host sent it
        raise RunError(f"{rx.host.name}: {exc}") from None
    return {"agent": result, "sender": sent.to_json(), "counters": delta.to_json(),
            "spec": {"count": spec.count, "interval_us": spec.interval_us,
                     "target_rate_pps": spec.target_rate_pps if spec.interval_us else None,
                     "packet_size": spec.packet_size, "port": spec.port,
                     "target": spec.target}}


def agent_result(host: str, text: str) -> dict[str, Any]:
    """The agent's JSON result; RunError naming `host` unless it is an object with the
    counters before and after the run (or if it reports the agent's own error)."""
    try:
        result = json.loads(text)
    except (ValueError, RecursionError):  # (not JSON, an integer past Python's limit)
        raise RunError(f"{host}: the agent wrote no JSON: {text[:200]!r}") from None
    if not isinstance(result, dict):
        raise RunError(f"{host}: the agent wrote no JSON object: {text[:200]!r}")
    if "error" in result:
        raise RunError(f"{host}: agent failed: {result['error']}")
    for key, ok in _AGENT_FIELDS.items():
        if key not in result:
            raise RunError(f"{host}: the agent's result has no {key}")
        if not ok(result[key]):
            raise RunError(f"{host}: the agent's result has a malformed {key}: "
                           f"{str(result[key])[:80]!r}")
    first, last = result["first_arrival"], result["last_arrival"]
    if result["packets"] and (first is None or last is None or last < first):
        raise RunError(f"{host}: the agent's result has {result['packets']} packets but "
                       f"arrivals from {first!r} to {last!r}")
    return result


def _count(x: object) -> bool:
    return type(x) is int and x >= 0


def _seconds(x: object) -> bool:
    return is_finite_number(x) and x >= 0  # type: ignore[operator]


def _texts(x: object) -> bool:
    return isinstance(x, dict) and all(isinstance(k, str) and isinstance(v, str)
                                       for k, v in x.items())


# what `derive` and the report read from an agent's result, and what each must be
_AGENT_FIELDS: dict[str, Any] = {
    "counters_before": _texts, "counters_after": _texts,
    **dict.fromkeys(("packets", "bytes", "wakeups", "ring_drops", "context_switches"),
                    _count),
    # (PF_RING cannot observe these: None)
    **dict.fromkeys(("empty_wakeups", "stranded"), lambda x: x is None or _count(x)),
    "cpu_s": _seconds,
    **dict.fromkeys(("first_arrival", "last_arrival", "last_delivery"),
                    lambda x: x is None or _seconds(x)),
    "backend": lambda x: isinstance(x, str), "notes": lambda x: isinstance(x, list),
    "ring": lambda x: x is None or isinstance(x, dict),
}


LOSS_LIMIT = 0.001  # above 0.1 % the receiver limited the run
SENDER_SHORTFALL = 0.9  # below 90 % of the paced rate the sender limited it


def derive(raw: dict[str, Any]) -> dict[str, Any]:
    """The run's metrics: throughputs (receive span and the seed paper's), loss, limits."""
    a, s, c = raw["agent"], raw["sender"], raw["counters"]
    received, sent = a["packets"], s["transmitted"]
    span = arrival_rate = None
    if a["packets"] > 1 and a["first_arrival"] is not None:
        if a["last_arrival"] > a["first_arrival"]:
            arrival_rate = (a["packets"] - 1) / (a["last_arrival"] - a["first_arrival"])
        end = max(a["last_delivery"] or 0.0, a["last_arrival"] or 0.0)
        span = end - a["first_arrival"]
    # hping3 may miss counting the packet it was sending when SIGINT stopped a flood
    loss = max(0.0, 1 - received / sent) if sent else 0.0
    drops = a["ring_drops"] + (c["drops_before_ring"] or 0)  # each drop counted once
    target = raw["spec"]["target_rate_pps"]
    limited = []
    # (the sender's rate counts hping3's start-up, ~50 ms: a short run that paced the
    # wire at the target read as short; the arrivals on the wire say whether it was)
    paced = [r for r in (s["rate_pps"], arrival_rate) if r is not None]
    if s.get("stopped") or (target and max(paced) < SENDER_SHORTFALL * target):
        limited.append("sender")  # stopped: it could not send its count in the time limit
    if loss > LOSS_LIMIT or a["ring_drops"]:
        limited.append("receiver")
    return {
        "packets_sent": sent, "packets_received": received,
        "bytes_received": a["bytes"], "bytes_sent": s["bytes_sent"],
        "loss": loss, "receive_span_s": span,
        "throughput_bps": 8 * a["bytes"] / span if span else None,
        "paper_throughput_bps": 8 * s["bytes_sent"] / s["duration_s"] if s["duration_s"] else
        None,
        "sender_rate_pps": s["rate_pps"], "target_rate_pps": target,
        "receive_rate_pps": received / span if span else None,
        "arrival_rate_pps": arrival_rate, "first_arrival": a["first_arrival"],
        "wakeups": a["wakeups"], "empty_wakeups": a["empty_wakeups"],
        "nic_interrupts": c["nic_interrupts"], "net_rx_softirqs": c["net_rx_softirqs"],
        "cpu_s": a["cpu_s"], "context_switches": a["context_switches"],
        "ring_drops": a["ring_drops"], "drops": drops, "stranded": a["stranded"],
        "limited_by": limited or ["offered rate"],
        "backend": a["backend"], "ring": a["ring"], "notes": a["notes"],
    }
