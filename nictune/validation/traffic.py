"""The sender: an hping3 command for one transmission, and its output parsed.

The plan's `packet_size` is the IP packet (the simulator's unit), so hping3's UDP payload
is `packet_size - 28` (20 bytes IPv4 header + 8 bytes UDP header). The count comes from
the transmission's size (scaled by `--scale`) or from its rate times `--duration`; the
rate becomes hping3's `-i uN` interval. hping3 prints its summary ("N packets
transmitted, ...") on stderr. The command is wrapped with `date +%s.%N` before and
after, so the sender's wall time is measured on the sender itself; in count mode hping3
waits one second for replies after the last packet (its COUNTREACHED_TIMEOUT) unless every
reply came back, and that second is taken off the sending time. hping3 exits with 1 when
no reply came back (the receiver's ICMP port-unreachable answers are rate limited): with a
parsed summary that is not a failure of the run.

hping3 runs under `timeout -s INT LIMIT`, its pid in a file, so a sender slower than the
paced rate is stopped at the time limit (the run is kept, `stopped` and sender-limited)
and an interrupted validation can stop it (`stop_command`) instead of leaving it sending.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import asdict, dataclass
from typing import Any

from nictune.errors import InputError, RunError
from nictune.plan import PlanEntry

HEADER_BYTES = 28  # IPv4 (20) + UDP (8)
LINGER_S = 1.0  # hping3 waits this long for replies once the count is sent
MIN_INTERVAL_US = 1
HPING_MAX = 2**31 - 1  # hping3 reads -c and -i uN as C ints
_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) packets received")
_STAMP = re.compile(r"^\d{9,}\.\d+\Z")


@dataclass(frozen=True)
class TrafficSpec:
    """What the sender sends for one run."""

    transmission: str
    target: str
    port: int
    packet_size: int  # IP bytes
    count: int  # packets (count mode); 0 in flood mode
    interval_us: int  # 0: --flood
    flood_s: float = 0.0  # flood mode: how long (hping3 ignores -c with --flood)

    @property
    def payload(self) -> int:
        return max(0, self.packet_size - HEADER_BYTES)

    @property
    def target_rate_pps(self) -> float:
        return 1e6 / self.interval_us if self.interval_us else math.inf


@dataclass(frozen=True)
class SenderResult:
    transmitted: int
    received: int  # replies hping3 saw (ICMP port unreachable): not the receiver's count
    wall_s: float
    duration_s: float  # sending time: wall time less hping3's linger, if it lingered
    rate_pps: float
    bytes_sent: int
    rc: int
    stopped: bool = False  # a paced run stopped at its time limit before its count

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def spec_for(entry: PlanEntry, target: str, port: int, scale: float | None = None,
             duration: float | None = None, max_rate: float | None = None) -> TrafficSpec:
    """The traffic of `entry` scaled down: `scale` of its packets, or `duration` seconds."""
    rate = entry.rate_pps
    if max_rate:
        rate = min(rate, max_rate) if rate else max_rate
    if not rate > 0 or not math.isfinite(rate):
        raise InputError(f"transmission {entry.id}: rate_pps must be > 0 to pace hping3")
    if 1e6 / rate > HPING_MAX:
        raise InputError(f"transmission {entry.id}: rate_pps {rate:g} paces packets further "
                         f"apart than hping3 can ({HPING_MAX} µs)")
    interval = max(MIN_INTERVAL_US, round(1e6 / rate))
    if duration is not None:
        if duration <= 0:
            raise InputError(f"--duration: expected seconds > 0, got {duration}")
        count = max(1, _packets(entry, rate * duration))
    else:
        scale = 1.0 if scale is None else scale
        if not 0 < scale <= 1:
            raise InputError(f"--scale: expected a fraction in (0, 1], got {scale}")
        total = math.ceil(entry.size_bytes / entry.packet_size) if entry.size_bytes else 0
        if total <= 0:
            raise InputError(f"transmission {entry.id}: size_bytes missing in the plan; "
                             "use --duration")
        count = max(1, _packets(entry, total * scale))
    return TrafficSpec(entry.id, target, port, entry.packet_size, count, interval)


def _packets(entry: PlanEntry, count: float) -> int:
    """`count` packets for one hping3 run (its -c is a C int: 2^32 + 1 sent one)."""
    if not count <= HPING_MAX:
        raise InputError(f"transmission {entry.id}: {count:.3g} packets are more than "
                         f"hping3 sends in one run ({HPING_MAX}); use --scale or --duration")
    return round(count)


def flood_spec(transmission: str, target: str, port: int, packet_size: int,
               seconds: float) -> TrafficSpec:
    """hping3 --flood for `seconds` (as fast as the sender can)."""
    return TrafficSpec(transmission, target, port, packet_size, 0, 0, flood_s=seconds)


def time_limit(spec: TrafficSpec) -> float:
    """Seconds the sender may take: a flood's length; a paced run 3x its nominal time + 60 s."""
    if not spec.interval_us:
        return spec.flood_s
    return spec.count * spec.interval_us / 1e6 * 3 + 60


def hping3_command(spec: TrafficSpec, pidfile: str) -> str:
    """The shell command for the sender: hping3 under `timeout -s INT` (the pid of `timeout`
    in `pidfile`, created afresh), timestamps around it, its exit code kept."""
    args = ["hping3", "--udp", "-q", "-p", str(spec.port), "-d", str(spec.payload)]
    if spec.interval_us:
        args += ["-c", str(spec.count), "-i", f"u{spec.interval_us}", spec.target]
    else:
        args += ["--flood", spec.target]
    pid = shlex.quote(pidfile)
    run = (f"sh -c 'set -C; echo $$ > \"$0\" && exec \"$@\"' {pid} "
           f"timeout -s INT {time_limit(spec):g} {shlex.join(args)}")
    return f"date +%s.%N; {run}; rc=$?; rm -f {pid}; date +%s.%N; exit $rc"


def stop_command(pidfile: str) -> str:
    """Stop the hping3 of `pidfile` (SIGINT through `timeout`, which passes it on)."""
    pid = shlex.quote(pidfile)
    return f"[ -s {pid} ] && kill -INT \"$(cat {pid})\" 2>/dev/null; rm -f {pid}"


def parse_hping3(stdout: str, stderr: str, rc: int, spec: TrafficSpec) -> SenderResult:
    """The sender's result from hping3's output; RunError if it sent nothing."""
    stamps = [float(x) for x in stdout.split() if _STAMP.match(x)]
    match = _SUMMARY.search(stderr) or _SUMMARY.search(stdout)
    if match is None or len(stamps) < 2:
        lines = [x.strip() for x in (stderr + "\n" + stdout).splitlines()
                 if x.strip() and not _STAMP.match(x.strip())]
        reason = lines[0] if lines else f"exit code {rc}"
        raise RunError(f"hping3 to {spec.target} failed: {reason}")
    transmitted, received = int(match.group(1)), int(match.group(2))
    timed_out = rc == 124  # `timeout` ended it: a flood as intended, a paced run too slow
    no_replies = rc == 1 and received == 0  # hping3 exits 1 when nothing answered
    if rc != 0 and not timed_out and not no_replies:
        raise RunError(f"hping3 to {spec.target} exited with {rc} after {transmitted} packets")
    wall = stamps[-1] - stamps[0]
    lingered = spec.interval_us and not timed_out and received < transmitted
    duration = wall - LINGER_S if lingered else wall
    if duration <= 0:
        duration = wall
    return SenderResult(transmitted=transmitted, received=received, wall_s=wall,
                        duration_s=duration,
                        rate_pps=transmitted / duration if duration > 0 else 0.0,
                        bytes_sent=transmitted * spec.packet_size, rc=rc,
                        stopped=bool(spec.interval_us and timed_out))
