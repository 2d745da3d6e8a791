"""Read everything nictune may change on a host in one SSH round trip.

One POSIX shell script prints tagged sections (`@@section name`); the parsers turn them
into a `HostProbe`: per NIC the driver, link speed, coalescing/ring/feature/channel
parameters (`ethtool --json` where this host's ethtool accepts it for that command, text
otherwise), NAPI sysfs knobs, RPS masks, the NIC's IRQ lines and their affinity; per host
whether irqbalance runs, the busy-poll sysctls, PF_RING presence and module parameters,
the interface that carries our SSH session and the devices stacked under it.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from nictune.deploy import parsers
from nictune.deploy.inventory import HostInventory
from nictune.deploy.transport import Connection, HostError

PFRING_CONF = "/etc/pf_ring/pf_ring.conf"
CAPTURE_DIR = "/etc/nictune/capture"
STATE_DIR = "/var/lib/nictune"  # on the host: restore script and timer state
SYSCTLS = ("busy_read", "busy_poll")
ETHTOOL_COMMANDS = ("c", "g", "l", "k")
END = "@@end of nictune probe"  # the last line: without it the output is truncated
KILLED = "@@killed"  # after an ethtool output cut short by a signal
PROBE_ATTEMPTS = 3


class ProbeError(HostError):
    """The probe's output was incomplete or unreadable (the session is still usable);
    it is never taken for the host's state. Bad remote output: exit code 2."""

    exit_code = 2


def capture_profile_path(host: HostInventory, iface: str) -> str:
    """Where the capture profile of `iface` lives on `host` (the validation agent reads it)."""
    return host.remote_path(f"{CAPTURE_DIR}/{iface}.json")


@dataclass
class NicProbe:
    nic: str
    iface: str
    exists: bool = True
    driver: str = ""
    driver_version: str = ""
    bus_info: str = ""
    speed_mbps: int | None = None
    coalesce: dict[str, Any] | None = None
    ring: dict[str, dict[str, Any]] | None = None
    channels: dict[str, dict[str, Any]] | None = None
    features: dict[str, dict[str, Any]] | None = None
    formats: dict[str, str] = field(default_factory=dict)  # ethtool cmd -> json|text
    errors: dict[str, str] = field(default_factory=dict)  # ethtool cmd -> error text
    napi: dict[str, int | None] = field(default_factory=dict)
    rps_cpus: dict[str, int] = field(default_factory=dict)  # rx queue -> CPU mask
    irqs: dict[int, str] = field(default_factory=dict)  # IRQ -> handler name
    irq_affinity: dict[int, str] = field(default_factory=dict)  # IRQ -> smp_affinity_list
    capture_profile: str | None = None  # text of the capture profile file


@dataclass
class HostProbe:
    host: str
    kernel: str = ""
    cpus: int = 1
    ethtool_version: str = ""
    irqbalance: bool = False
    ssh_iface: str | None = None  # holds the SSH session's server address; None: unknown
    # ssh_iface and every device under it (a VLAN's parent, bond slaves, bridge ports):
    # the interfaces the management-interface guard protects; None: unknown
    mgmt_ifaces: list[str] | None = None
    sysctls: dict[str, int | None] = field(default_factory=dict)
    pfring_loaded: bool = False
    pfring_params: dict[str, str] = field(default_factory=dict)
    pfring_conf: str | None = None
    timer: str = "none"  # the on-host restore timer: armed | fired | none
    nics: dict[str, NicProbe] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _script(host: HostInventory) -> str:
    q = shlex.quote
    lines = [
        "export LC_ALL=C",
        "echo '@@section host'",
        'echo "kernel=$(uname -r)"',
        'echo "cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)"',
        'echo "ethtool=$(ethtool --version 2>/dev/null | head -n1)"',
        'if pgrep -x irqbalance >/dev/null 2>&1; then echo irqbalance=yes; '
        'else echo irqbalance=no; fi',
        'echo "ssh=${NICTUNE_SSH:-${SSH_CONNECTION:-}}"',
        'if [ -d /proc/net/pf_ring ] || [ -d /sys/module/pf_ring ]; then '
        'echo pfring=yes; else echo pfring=no; fi',
    ]
    for name in SYSCTLS:
        path = f"/proc/sys/net/core/{name}"
        lines.append(f'if [ -r {path} ]; then echo "sysctl.{name}=$(cat {path})"; '
                     f'else echo "sysctl.{name}="; fi')
    lines += [
        "echo '@@section pfring_params'",
        "for f in /sys/module/pf_ring/parameters/*; do [ -r \"$f\" ] && "
        "echo \"${f##*/}=$(cat \"$f\")\"; done 2>/dev/null",
        "echo '@@section pfring_conf'",
        _cat(host.remote_path(PFRING_CONF)),
        "echo '@@section addresses'",
        "ip -o addr show 2>/dev/null",
        "echo '@@section lower'",  # UPPER LOWER: VLAN/macvlan parents, bond slaves, ports
        'for d in /sys/class/net/*; do n=${d##*/}; '
        'for l in "$d"/lower_*; do [ -e "$l" ] && echo "$n ${l##*/lower_}"; done; '
        'for l in "$d"/brif/*; do [ -e "$l" ] && echo "$n ${l##*/}"; done; '
        'if [ -r "$d/bonding/slaves" ]; then for l in $(cat "$d/bonding/slaves"); do '
        'echo "$n $l"; done; fi; done 2>/dev/null',
        "echo '@@section interrupts'",
        "cat /proc/interrupts",
        "echo '@@section affinity'",
        "grep -H . /proc/irq/[0-9]*/smp_affinity_list 2>/dev/null",
        "echo '@@section timer'",
        f"d={q(host.remote_path(STATE_DIR))}; if [ -e \"$d/armed\" ]; then echo armed; "
        "elif [ -e \"$d/fired\" ]; then echo fired; else echo none; fi",
    ]
    for nic, iface in host.nics.items():
        i, sysfs = q(iface), f"/sys/class/net/{iface}"
        lines += [
            f"echo {q('@@section nic ' + nic)}",
            f"if [ -e {q(sysfs)} ]; then echo exists=yes; else echo exists=no; fi",
            f'echo "speed=$(cat {q(sysfs + "/speed")} 2>/dev/null)"',
            f'echo "gro_flush_timeout=$(cat {q(sysfs + "/gro_flush_timeout")} 2>/dev/null)"',
            f'echo "napi_defer_hard_irqs=$(cat {q(sysfs + "/napi_defer_hard_irqs")} '
            '2>/dev/null)"',
            f'dev=$(readlink -f {q(sysfs + "/device")} 2>/dev/null); echo "device=${{dev##*/}}"',
            f'echo "msi_irqs=$(ls {q(sysfs + "/device/msi_irqs")} 2>/dev/null | tr "\\n" " ")"',
            f"for f in {q(sysfs)}/queues/rx-*/rps_cpus; do [ -r \"$f\" ] && "
            "echo \"rps.$(basename $(dirname $f))=$(cat $f)\"; done 2>/dev/null",
            f"echo {q('@@section ethtool-i ' + nic)}",
            f"ethtool -i {i} 2>&1",
        ]
        for cmd in ETHTOOL_COMMANDS:
            # an empty output (ethtool killed, a busy host) is retried; an output cut short
            # by a signal (exit status > 128) is marked, and the probe retried, never parsed
            # (on a line of its own: an output cut mid-line would glue it to its last line)
            killed = f"[ $? -gt 128 ] && printf '\\n%s\\n' {KILLED}"
            lines += [
                f"for n in 1 2 3; do out=$(ethtool --json -{cmd} {i} 2>&1); rc=$?; "
                '[ -n "$out" ] && break; sleep 0.2; done',
                "case \"$out\" in *'bad command line'*|*'unrecognized option'*) "
                f"echo {q('@@section text-' + cmd + ' ' + nic)}; "
                f"ethtool -{cmd} {i} 2>&1 || {{ {killed}; }};; "
                f"*) echo {q('@@section json-' + cmd + ' ' + nic)}; "
                "printf '%s\\n' \"$out\"; (exit $rc) || { " + killed + "; };; esac",
            ]
        lines += [f"echo {q('@@section capture ' + nic)}",
                  _cat(host.remote_path(f"{CAPTURE_DIR}/{iface}.json"))]
    return "\n".join([*lines, f"echo {q(END)}"]) + "\n"


def _cat(path: str) -> str:
    """Print a file's bytes in hex (POSIX `od`) and then `@@eof`, or `@@missing`.

    Hex, not the text: a file without a final newline would glue the next section
    marker onto its last line, and no content can pass for a marker."""
    q = shlex.quote(path)
    return (f"if [ ! -e {q} ]; then echo '@@missing'; "
            f"elif od -An -v -tx1 {q}; then echo '@@eof'; fi")


def _split(text: str) -> list[tuple[str, str, str]]:
    """[(section, name, body)] from the script's output; a marker inside a line (the
    line before it was cut short) is a ParseError, never a section silently lost."""
    out: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        if "@@section " in line[1:]:
            raise parsers.ParseError(f"probe output: a section marker inside a line: "
                                     f"{line[:80]!r}")
        if line.startswith("@@section "):
            parts = line.split(" ", 2)
            out.append((parts[1], parts[2] if len(parts) > 2 else "", []))
        elif out:
            out[-1][2].append(line)
    return [(s, n, "\n".join(b) + ("\n" if b else "")) for s, n, b in out]


def _kv(body: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in body.splitlines() if "=" in line)


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _count(text: str | None, what: str) -> int | None:
    """A knob's value as the host printed it: None when it printed none (the file or
    sysctl is missing), else digits only — `-1`, `+5` or `1_000` are garbled output, not a
    value to save in a snapshot and write back."""
    text = (text or "").strip()
    return parsers.count(text, f"probe output: {what}") if text else None


def _file(body: str, what: str) -> str | None:
    """The text of a file `_cat` printed (None: there is none), exactly its bytes."""
    if body.strip() == "@@missing":
        return None
    digits, eof, rest = body.rpartition("@@eof")
    if not eof or rest.strip():
        raise parsers.ParseError(f"{what}: the file could not be read: {body[:80]!r}")
    try:
        text = bytes.fromhex("".join(digits.split())).decode()
    except ValueError:  # (UnicodeDecodeError too)
        raise parsers.ParseError(f"{what}: not UTF-8 text (or garbled): "
                                 f"{digits[:80]!r}") from None
    if "\0" in text:
        raise parsers.ParseError(f"{what}: holds a NUL byte, which no restore can write")
    return text


def _ssh_ifaces(ssh: str, addresses: str) -> list[str] | None:
    """The interfaces holding the server address of $SSH_CONNECTION; None when that is
    unknown (no $SSH_CONNECTION, no `ip` output, or no interface holds the address)."""
    parts = ssh.split()
    if len(parts) < 3:
        return None
    try:
        server = ipaddress.ip_address(parts[2].split("%")[0])
    except ValueError:
        return None
    found = []
    for line in addresses.splitlines():
        tokens = line.split()
        if len(tokens) >= 4 and tokens[2] in ("inet", "inet6"):
            try:
                if ipaddress.ip_interface(tokens[3]).ip == server:
                    found.append(tokens[1].split("@")[0])
            except ValueError:
                continue
    return found or None


def _lower(body: str) -> dict[str, set[str]]:
    """{upper device: its lower devices} from the `lower` section."""
    out: dict[str, set[str]] = {}
    for line in body.splitlines():
        upper, _, below = line.partition(" ")
        if below.strip():
            out.setdefault(upper, set()).add(below.strip())
    return out


def _below(ifaces: list[str], lower: dict[str, set[str]]) -> list[str]:
    """`ifaces` and every device stacked under them, however deep (VLAN on a bond)."""
    seen: set[str] = set()
    todo = list(ifaces)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(lower.get(name, ()))
    return sorted(seen)


def parse_probe(host: HostInventory, text: str) -> HostProbe:
    """A HostProbe from the probe script's output."""
    probe = HostProbe(host.name)
    irq_lines: list[parsers.IrqLine] = []
    affinity: dict[int, str] = {}
    addresses = ""
    lower: dict[str, set[str]] = {}
    extra: dict[str, dict[str, str]] = {}
    for section, name, body in _split(text):
        nic = probe.nics.get(name)
        if section == "host":
            kv = _kv(body)
            probe.kernel, probe.ethtool_version = kv.get("kernel", ""), kv.get("ethtool", "")
            probe.cpus = _int(kv.get("cpus")) or 1
            if not 1 <= probe.cpus <= parsers.MAX_CPUS:
                raise parsers.ParseError(f"probe output: cpus={kv.get('cpus')!r} is not a "
                                         f"CPU count (1..{parsers.MAX_CPUS})")
            probe.irqbalance = kv.get("irqbalance") == "yes"
            probe.pfring_loaded = kv.get("pfring") == "yes"
            probe.sysctls = {s: _count(kv.get(f"sysctl.{s}"), f"sysctl.{s}") for s in SYSCTLS}
            extra["ssh"] = {"ssh": kv.get("ssh", "")}
        elif section == "pfring_params":
            probe.pfring_params = _kv(body)
        elif section == "pfring_conf":
            probe.pfring_conf = _file(body, PFRING_CONF)
        elif section == "addresses":
            addresses = body
        elif section == "lower":
            lower = _lower(body)
        elif section == "interrupts":
            # (the kernel's file starts with its CPU header: none is a cat that failed or
            # garbage, not "no IRQ lines" — deploy would then say the NIC had none)
            if parsers.cpu_columns(body.split("\n", 1)[0]) is None:
                raise parsers.ParseError(f"/proc/interrupts unreadable: {body[:80]!r}")
            irq_lines = parsers.parse_interrupts(body)
        elif section == "affinity":
            for line in body.splitlines():  # /proc/irq/N/smp_affinity_list:CPUS
                path, _, cpus = line.partition(":")
                irq = path.split("/")[3] if path.count("/") >= 4 else ""
                if parsers.is_count(irq) and cpus.strip():
                    parsers.cpu_list(cpus)  # (a garbled list is unreadable output)
                    affinity[int(irq)] = cpus.strip()
        elif section == "timer":
            probe.timer = body.strip() or "none"
        elif section == "nic":
            kv = _kv(body)
            if name not in host.nics:
                raise parsers.ParseError(f"probe output has a section for NIC {name!r}, "
                                         "which the inventory does not name")
            nic = NicProbe(name, host.nics[name], exists=kv.get("exists") == "yes")
            nic.speed_mbps = _int(kv.get("speed"))
            if nic.speed_mbps is not None and nic.speed_mbps < 0:
                nic.speed_mbps = None
            nic.napi = {k: _count(kv.get(k), k) for k in ("gro_flush_timeout",
                                                      "napi_defer_hard_irqs")}
            nic.rps_cpus = {k[4:]: parsers.hex_mask(v) for k, v in kv.items()
                            if k.startswith("rps.") and v.strip()}
            extra[name] = {"device": kv.get("device", ""), "msi": kv.get("msi_irqs", "")}
            probe.nics[name] = nic
        elif nic is not None and nic.exists:
            _nic_section(nic, section, body)
    holders = _ssh_ifaces(extra.get("ssh", {}).get("ssh", ""), addresses)
    probe.ssh_iface = holders[0] if holders else None
    probe.mgmt_ifaces = None if holders is None else _below(holders, lower)
    for name, nic in probe.nics.items():
        msi = [int(x) for x in extra[name]["msi"].split() if parsers.is_count(x)]
        names = {x.irq: x.name for x in irq_lines}
        if msi:
            nic.irqs = {irq: names.get(irq, "") for irq in msi}
        elif nic.exists:
            device = extra[name]["device"]
            found = parsers.irqs_of(irq_lines, nic.iface, nic.bus_info,
                                    "" if device in ("", "device", ".") else device)
            nic.irqs = {x.irq: x.name for x in found}
        nic.irq_affinity = {irq: affinity.get(irq, "") for irq in nic.irqs}
    return probe


def _nic_section(nic: NicProbe, section: str, body: str) -> None:
    if section == "ethtool-i":
        info = parsers.parse_driver_info(body)
        nic.driver, nic.driver_version = info.get("driver", ""), info.get("version", "")
        nic.bus_info = info.get("bus-info", "")
        return
    if section == "capture":
        nic.capture_profile = _file(body, f"capture profile of {nic.iface}")
        return
    fmt, _, cmd = section.partition("-")
    if fmt not in ("json", "text") or cmd not in ETHTOOL_COMMANDS:
        return
    nic.formats[cmd] = fmt
    if any(line.endswith(KILLED) for line in body.splitlines()):
        raise parsers.ParseError(f"ethtool -{cmd} {nic.iface} was killed mid-output")
    if not body.strip():
        raise parsers.ParseError(f"ethtool -{cmd} {nic.iface} printed nothing (3 tries)")
    if parsers.unsupported(body):
        nic.errors[cmd] = body.strip()[:200]
        return
    if fmt == "json" and body.lstrip()[0] not in "[{":  # (not "absent": Permission denied)
        raise parsers.ParseError(f"ethtool --json -{cmd} {nic.iface}: neither JSON nor "
                                 f"'not supported': {body.strip()[:80]!r}")
    target = {"c": "coalesce", "g": "ring", "l": "channels", "k": "features"}[cmd]
    parse = {
        ("text", "c"): parsers.parse_coalesce, ("json", "c"): parsers.parse_json_coalesce,
        ("text", "g"): parsers.parse_ring, ("json", "g"): parsers.parse_json_ring,
        ("text", "l"): parsers.parse_channels, ("json", "l"): parsers.parse_json_channels,
        ("text", "k"): parsers.parse_features, ("json", "k"): parsers.parse_json_features,
    }[(fmt, cmd)]
    setattr(nic, target, parse(body))


def probe_host(conn: Connection) -> HostProbe:
    """Probe the host behind an open connection (one round trip; an incomplete or
    unreadable output is retried, then raised as ProbeError — never parsed as state)."""
    why = ""
    for _ in range(PROBE_ATTEMPTS):
        res = conn.run(_script(conn.host), timeout=max(conn.command_timeout, 30.0))
        lines = res.stdout.rstrip("\n").splitlines()
        if not res.ok or not lines or lines[-1] != END:
            why = (f"probe output incomplete (exit code {res.rc}, {len(res.stdout)} bytes): "
                   f"{res.error_line()}")
            continue
        try:
            return parse_probe(conn.host, "\n".join(lines[:-1]) + "\n")
        except (parsers.ParseError, *parsers.UNREADABLE) as exc:
            why = f"probe output unreadable: {exc}"
    raise ProbeError(conn.host.name, f"{why} ({PROBE_ATTEMPTS} attempts)")
