"""Per-host transaction: snapshot -> apply -> verify, or restore in reverse and verify.

A host ends every deploy either fully applied and verified by read-back, or restored to
its pre-deploy state and verified — never half-configured:

1. probe the host; save the ORIGINAL snapshot locally (STATE/snapshots/HOST.json) before
   the first change — a later deploy only adds knobs it did not know, so `rollback`
   always returns to the pre-nictune state;
2. plan every backend's targets; the diff against the current values is the change set
   (empty: nothing is touched, so re-deploying a plan changes nothing);
3. write a restore script (the before-values, backends in reverse order) to the host and
   arm an on-host timer (`setsid sh -c 'sleep S; ...'`) that runs it unless disarmed in
   time: a dropped SSH session or a change that cuts the management link undoes itself;
4. apply backend by backend (audit log line per knob), probe again and compare;
5. on any failure run the restore script over SSH (or, if the session is gone, leave it to
   the timer), probe again and verify every knob is back;
6. disarm the timer — or, with `confirm_timeout`, leave it armed until `confirm_host`.

`apply_host` / `restore_host` / `confirm_host` are the function API (validation switches
a host between arms with `apply_host`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import re
import shlex
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nictune.deploy.backends import HostContext, Note, backend, backends, names, split_key
from nictune.deploy.inventory import HostInventory
from nictune.deploy.parsers import UNREADABLE
from nictune.deploy.probe import STATE_DIR, HostProbe, ProbeError, probe_host
from nictune.deploy.transport import CommandResult, Connection, HostError
from nictune.files import atomic_write
from nictune.model import NicSetting

# a knob's key: nic/<NIC id>/<backend>/<param> or host/<backend>/<param>
KNOB_KEY = re.compile(r"^(nic/[^/]+/|host/)[a-z_]+/[^/].*\Z", re.S)
SNAPSHOT_FORMAT = 2  # 2 adds "nics" (NIC id -> iface, bus_info); format 1 still loads
# backends whose knobs a NIC keeps while it exists (IRQ numbers and RX queues can change
# with a reboot or a driver reload; these are the driver's capabilities)
STEADY = ("coalesce", "ring", "channels", "features", "napi")
GUARD_TIMEOUT = 60.0  # s the on-host timer waits before restoring an unfinished deploy


class ApplyFailed(Exception):
    """A knob could not be set or did not read back as planned."""


class ArmFailed(HostError):
    """The restore timer could not be armed (so nothing was applied)."""


@dataclass(frozen=True)
class Change:
    knob: str
    backend: str
    before: Any
    after: Any
    # `after` was read from the host (a snapshot's value, a knob's original): it must read
    # back exactly, with no driver rounding; `before` always was
    exact: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"knob": self.knob, "backend": self.backend, "before": self.before,
                "after": self.after}


@dataclass
class HostResult:
    """What happened on one host. `ok` is false for failed, restored and refused."""

    host: str
    status: str  # applied|unchanged|dry-run|pending-confirm|confirmed|rolled-back|
    #              no-snapshot|refused|restored|failed|unknown (session lost mid-disarm)
    ok: bool
    changes: list[Change] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    error: str = ""
    restore_verified: bool | None = None
    seconds: float = 0.0
    token: str = ""  # this deploy's on-host timer arming (resolve_host asks the host about it)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "ok": self.ok, "error": self.error,
                "restore_verified": self.restore_verified, "seconds": round(self.seconds, 3),
                "changes": [c.to_json() for c in self.changes],
                "notes": [n.to_json() for n in self.notes]}


# ----------------------------------------------------------------------------- local state


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


class AuditLog:
    """Append-only JSON lines: time, host, knob, before, after, action, ok."""

    _lock = threading.Lock()

    def __init__(self, path: Path):
        self.path = path

    def write(self, host: str, knob: str, before: Any, after: Any, action: str,
              ok: bool = True, detail: str = "") -> None:
        record = {"time": _now(), "host": host, "knob": knob, "before": before,
                  "after": after, "action": action, "ok": ok}
        if detail:
            record["detail"] = detail
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as fh:
                fh.write(json.dumps(record, sort_keys=True) + "\n")


def snapshot_path(state_dir: Path, host: str) -> Path:
    return state_dir / "snapshots" / f"{host}.json"


@dataclass(frozen=True)
class Snapshot:
    """A host's original knob values, the address they were read at and, per NIC id, the
    interface (and its bus address) its `nic/ID/...` values were read from. A format-1
    snapshot has no `nics`: for its NICs the mapping is unknown."""

    path: Path
    doc: dict[str, Any]

    @property
    def knobs(self) -> dict[str, Any]:
        return self.doc.get("knobs", {})

    @property
    def nics(self) -> dict[str, dict[str, str]]:
        return self.doc.get("nics", {})


def read_snapshot(state_dir: Path, host: str) -> Snapshot | None:
    path = snapshot_path(state_dir, host)
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        nics = doc.get("nics", {})
        knobs = doc.get("knobs")
        fmt = doc.get("nictune_snapshot")
        if type(fmt) is not int or fmt not in (1, SNAPSHOT_FORMAT):  # (true == 1)
            raise ValueError("not a nictune snapshot of a known format")
        # (an empty one "rolled back" nothing and was archived, the host left tuned)
        if not isinstance(knobs, dict) or not knobs:
            raise ValueError("no knob values")
        problem = next(filter(None, (_knob_problem(k, v) for k, v in knobs.items())), "")
        if problem:
            raise ValueError(problem)
        if not all(isinstance(m, dict) and isinstance(m.get("iface"), str)
                   for m in nics.values()):
            raise ValueError("nics malformed")
    except (ValueError, AttributeError, OSError, RecursionError) as exc:
        raise HostError(host, f"snapshot {path} is corrupt ({exc}); refusing to touch the "
                              "host") from None
    return Snapshot(path, doc)


def _knob_problem(key: str, value: Any) -> str:
    """Why a snapshot's knob is not one nictune wrote ("" when it is): a key of no
    backend, or one its backend never reads (the wrong scope, nic or host, or param), or
    a value it never reads there (a ring of "abc" failed the rollback at its command, and
    the host stayed tuned)."""
    try:
        owner = backend(split_key(key)[1]) if KNOB_KEY.match(key) else None
    except KeyError:
        owner = None
    if owner is None:
        return f"knob {key!r} malformed"
    if not owner.valid(key, value):
        return f"knob {key!r}: {str(value)[:80]!r} is not a value nictune reads from a host"
    return ""


def load_snapshot(state_dir: Path, host: str) -> dict[str, Any] | None:
    """The original knob values (None: nictune never changed the host)."""
    snap = read_snapshot(state_dir, host)
    return None if snap is None else snap.knobs


def merge_snapshot(saved: Snapshot | None, current: dict[str, Any]) -> dict[str, Any]:
    """The original knob values: the snapshot's, plus the current value of every knob it
    lacks (a NIC added since: its current value is still the pre-nictune one)."""
    return {**current, **(saved.knobs if saved else {})}


def _nic_ids(knobs: dict[str, Any]) -> set[str]:
    return {split_key(k)[0] for k in knobs} - {""}


def _new_mappings(host: HostInventory, probe: HostProbe,
                  saved: Snapshot | None) -> dict[str, dict[str, str]]:
    """NIC id -> {iface, bus_info} for the NICs whose values enter the snapshot now (a NIC
    a format-1 snapshot already holds stays unknown: its values may be another iface's)."""
    old = _nic_ids(saved.knobs) | set(saved.nics) if saved else set()
    return {nic: {"iface": iface, "bus_info": probe.nics[nic].bus_info}
            for nic, iface in host.nics.items()
            if nic not in old and nic in probe.nics and probe.nics[nic].exists}


def ensure_snapshot(host: HostInventory, probe: HostProbe, saved: Snapshot | None,
                    current: dict[str, Any]) -> None:
    """Save the original knob values (`merge_snapshot`): the first deploy saves them,
    later ones only add knobs (and NIC mappings) the snapshot lacks (their current value
    is still the pre-nictune one). `saved` is the snapshot as read (and checked by
    `snapshot_mismatch`)."""
    knobs = merge_snapshot(saved, current)
    added = _new_mappings(host, probe, saved)
    if saved is not None and knobs == saved.knobs and not added:
        return
    doc = saved.doc if saved else {"host": host.name, "address": host.address,
                                   "taken": _now()}
    doc = {**doc, "nictune_snapshot": SNAPSHOT_FORMAT, "knobs": knobs,
           "nics": {**(saved.nics if saved else {}), **added}}
    atomic_write(snapshot_path(host.state_dir, host.name),
                 json.dumps(doc, indent=1, sort_keys=True) + "\n")


def snapshot_mismatch(saved: Snapshot | None, host: HostInventory, probe: HostProbe,
                      rollback: bool) -> tuple[str, list[Note]]:
    """Why the snapshot's values cannot be trusted for this inventory entry ("" if they
    can): another address, a NIC id now naming another interface (or the same name on
    another bus address: renamed interfaces), an interface now under another NIC id, or —
    for a rollback — a NIC id the inventory dropped. NICs of a format-1 snapshot (no
    mapping) give a warning note."""
    if saved is None:
        return "", []
    problems: list[str] = []
    notes: list[Note] = []
    address = saved.doc.get("address")
    if address and address != host.address:
        problems.append(f"it was taken at address {address}, the inventory says "
                        f"{host.address} (if this is the same machine, set \"address\" to "
                        f"{host.address!r} in the snapshot)")
    for nic in sorted(_nic_ids(saved.knobs) | set(saved.nics)):
        problem = _nic_mismatch(nic, saved.nics.get(nic), host, probe, rollback)
        if problem:
            problems.append(problem)
        elif nic not in saved.nics and nic in host.nics:
            notes.append(Note(host.name, nic, "snapshot", "warning",
                              f"the snapshot predates NIC mappings: it cannot tell whether "
                              f"its {nic} values were read from {host.nics[nic]} (unknown, "
                              "not checked)"))
    owner = {m["iface"]: nic for nic, m in saved.nics.items()}
    for nic, iface in host.nics.items():
        other = owner.get(iface, nic)
        if other != nic and nic not in saved.nics:
            problems.append(f"{nic}: the snapshot holds the original values of {iface} "
                            f"under the NIC id {other} (call it {other} in the inventory "
                            "again, or roll back before renaming it)")
    if not problems:
        return "", notes
    return (f"snapshot {saved.path} does not match the inventory, nothing was changed: "
            + "; ".join(problems)), notes


def _nic_mismatch(nic: str, was: dict[str, str] | None, host: HostInventory,
                  probe: HostProbe, rollback: bool) -> str:
    if was is None:
        return ""
    now = host.nics.get(nic)
    if now is None:
        return (f"{nic}: the snapshot holds the original values of {was['iface']}, the "
                f"inventory has no {nic} (add `{nic}: {was['iface']}` to its nics to roll "
                "it back)") if rollback else ""
    if now != was["iface"]:
        return (f"{nic}: the snapshot holds the original values of {was['iface']}, the "
                f"inventory now names {now} (to roll {was['iface']} back, name it for {nic} "
                f"again, roll back, then correct the inventory; if {was['iface']} was only "
                f"renamed to {now}, set its \"iface\" to {now!r} in the snapshot)")
    bus = probe.nics[nic].bus_info if nic in probe.nics else ""
    if was.get("bus_info") and bus and bus != was["bus_info"]:
        return (f"{nic}: {now} is now the device at {bus}, the snapshot's values are those of "
                f"the device at {was['bus_info']} (interfaces renamed? name that device's "
                f"interface for {nic} in the inventory and the snapshot)")
    return ""


def archive_snapshot(state_dir: Path, host: str, why: str = "rolled-back") -> None:
    path = snapshot_path(state_dir, host)
    if path.exists():
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        path.replace(path.with_name(f"{host}.{why}-{stamp}.json"))


# ----------------------------------------------------------------------------- on-host timer


@dataclass(frozen=True)
class TimerRestore:
    """What the on-host timer's restore script did: exit code ('' if it left none: still
    running, or killed) and the last lines of its output."""

    rc: str
    log: str

    @property
    def ok(self) -> bool:
        return self.rc == "0"

    def describe(self) -> str:
        code = f"exit code {self.rc}" if self.rc else "no exit code (still running, or killed)"
        return code + (f": {self.log}" if self.log else "")


# the timer process $p (watchdog.pid) is alive and is the one of arming TOKEN: its command
# line carries the token (PIDs are reused; lab hosts share one PID namespace)
ALIVE = ('[ -n "$p" ] && tr \'\\0\' \'\\n\' < "/proc/$p/cmdline" 2>/dev/null '
         '| grep -qxF "{token}"')


class Watchdog:
    """The on-host timer that runs the restore script unless disarmed in time.

    State files in ROOT/var/lib/nictune: `armed` (holding this arming's token) while
    waiting; the timer and `disarm` race with `mv armed ...` so exactly one of them wins,
    and the winner's file (`fired` or `disarmed`) keeps the token, so a client whose
    session broke can learn on reconnect which one won. The timer only fires for its own
    token, and `disarm` only kills a process whose command line carries the token (PIDs are
    reused; lab hosts share one PID namespace). Apply steps and the restore script hold
    `flock` on `lock`, so a restore never interleaves with a still-running apply.
    """

    LOCK = 'if command -v flock >/dev/null 2>&1; then exec 9>"$d/lock"; flock -w 60 9; fi'

    def __init__(self, conn: Connection):
        self.conn = conn
        self.dir = conn.host.remote_path(STATE_DIR)

    def collect(self, limit: float = 30.0) -> TimerRestore | None:
        """After the timer fired: wait (up to `limit` s) for its restore script, mark the
        firing as seen and return the script's exit code and last lines; None if no fired
        timer awaited this."""
        d = shlex.quote(self.dir)
        res = self.conn.run(
            f"d={d}; [ -e \"$d/fired\" ] || exit 0; i=0; while [ ! -e \"$d/restore.rc\" ] "
            f"&& [ $i -lt {int(limit * 10)} ]; do sleep 0.1; i=$((i+1)); done; "
            "mv -f \"$d/fired\" \"$d/seen\"; echo \"@@rc $(cat \"$d/restore.rc\" 2>/dev/null)\"; "
            "tail -n 3 \"$d/restore.log\" 2>/dev/null", timeout=limit + 10)
        lines = res.stdout.splitlines()
        rc = next((x[5:].strip() for x in lines if x.startswith("@@rc ")), None)
        if rc is None:
            return None
        log = " | ".join(x.strip() for x in lines if x.strip() and not x.startswith("@@rc "))
        return TimerRestore(rc, log[:300])

    def arm(self, restore: list[str], seconds: float, token: str,
            then: str = "") -> CommandResult:
        """Upload the restore script and start the timer, then run `then` (the apply
        steps, under the lock) — all in one round trip; `then` never runs unless the timer
        is armed."""
        script = ("#!/bin/sh\n# nictune: restore the pre-deploy values\n"
                  f"d=\"$(dirname \"$0\")\"; {self.LOCK}\nrc=0\n"
                  + "".join(f"{cmd} || rc=1\n" for cmd in restore) + "exit $rc\n")
        d = shlex.quote(self.dir)
        timer = ('sleep "$1"; if [ "$(cat "$0/armed" 2>/dev/null)" = "$2" ] && '
                 'mv "$0/armed" "$0/fired" 2>/dev/null; then '
                 'sh "$0/restore.sh" > "$0/restore.log" 2>&1; echo $? > "$0/restore.rc"; fi')
        # The script arrives first (stdin can stall on a failing link), then `armed` is
        # claimed only if absent (noclobber): of two runs that passed the probe at once,
        # the second replaces neither the first's restore script nor its timer, and
        # changes nothing. From the claim to the timer's start only local files move.
        tmp = f"\"$d/restore.sh.{token}\""
        res = self.conn.run(
            f"d={d}; mkdir -p \"$d\" && cat > {tmp} || exit 1; "
            f"(set -C; echo {token} > \"$d/armed\") 2>/dev/null || "
            f"{{ rm -f {tmp}; echo '@@busy'; exit 1; }}; "
            f"mv -f {tmp} \"$d/restore.sh\" || {{ rm -f \"$d/armed\"; exit 1; }}; "
            "rm -f \"$d/fired\" \"$d/disarmed\" \"$d/restore.rc\" \"$d/watchdog.pid\"; "
            f"echo {token} > \"$d/applying\"; "
            f"setsid sh -c {shlex.quote(timer)} \"$d\" {max(1, round(seconds))} {token} "
            "</dev/null >/dev/null 2>&1 & echo $! > \"$d/watchdog.pid\"; echo '@@armed'\n"
            + (f"{self.LOCK}\n{then}" if then else ""), stdin=script.encode())
        lines = res.stdout.splitlines()
        if "@@busy" in lines:
            raise ArmFailed(self.conn.host.name, "another run armed this host's restore timer "
                                                 "first (two deploys at once?); nothing was "
                                                 "changed")
        if "@@armed" not in lines:
            raise ArmFailed(self.conn.host.name, f"cannot arm the restore timer, nothing was "
                                                 f"changed: {res.error_line()}")
        return res

    # The arming's state, into $s: `none` (nothing armed; `fired` if a timer fired and its
    # restore is not collected yet), `verified` (its deploy verified its change and awaits
    # confirmation — or an arming of a nictune without the `applying` marker, which meant
    # that), `unverified` (its deploy is still applying, or was cut short: `applying`
    # holds its token and its timer will restore the host) or `stale` (the same, but its
    # timer is gone: the host rebooted, the process was killed).
    STATE = ('a=$(cat "$d/armed" 2>/dev/null); p=$(cat "$d/watchdog.pid" 2>/dev/null); '
             'if [ -z "$a" ]; then if [ -e "$d/fired" ]; then s=fired; else s=none; fi; '
             'elif [ "$a" != "$(cat "$d/applying" 2>/dev/null)" ]; then s=verified; '
             f'elif {ALIVE.format(token="$a")}; then s=unverified; else s=stale; fi; ')

    def disarm(self, token: str = "", verified: bool = False, stale: bool = False) -> str:
        """`disarmed` (we won), `fired` (the timer restored first) or `none`. With `token`
        only that arming is disarmed (`fired`: that arming fired); with `verified` only an
        arming whose deploy verified its change and awaits confirmation (`deploy
        --confirm`, a rollback), and with `stale` too one whose timer is gone (a rollback);
        else the arming's state (`STATE`) is returned; with neither, whatever is armed
        (validation putting back its own cut-short arm)."""
        d, t = shlex.quote(self.dir), shlex.quote(token)
        mine = f"[ \"$(cat \"$d/armed\" 2>/dev/null)\" = {t} ] && " if token else ""
        state, other = "", "none"
        if verified:
            state, other = self.STATE, "$s"
            mine = ('{ [ "$s" = verified ] || [ "$s" = ' + ("stale" if stale else "verified")
                    + ' ]; } && ')
        fired = f"grep -sqxF {t} \"$d/fired\" \"$d/seen\"" if token else "[ -e \"$d/fired\" ]"
        res = self.conn.run(
            f"d={d}; {state}if {mine}mv \"$d/armed\" \"$d/disarmed\" 2>/dev/null; then "
            "t=$(cat \"$d/disarmed\"); p=$(cat \"$d/watchdog.pid\" 2>/dev/null); "
            f"if [ -n \"$t\" ] && {ALIVE.format(token='$t')}; then "
            "pkill -P \"$p\" 2>/dev/null; kill \"$p\" 2>/dev/null; fi; "
            f"echo disarmed; elif {fired}; then echo fired; "
            f"elif [ -e \"$d/armed\" ]; then echo {other}; else echo none; fi",
            check=True)
        return res.stdout.strip() or "none"

    def arming(self) -> str:
        """The arming's state (`STATE`): none, fired, verified, unverified or stale."""
        d = shlex.quote(self.dir)
        res = self.conn.run(f"d={d}; {self.STATE}echo $s", check=True)
        return res.stdout.strip() or "none"

    def mark_verified(self, token: str) -> None:
        """Record that arming `token`'s deploy verified its change: from now on it awaits
        confirmation (`deploy --confirm`, or a rollback, may disarm it)."""
        d, t = shlex.quote(self.dir), shlex.quote(token)
        self.conn.run(f"d={d}; [ \"$(cat \"$d/armed\" 2>/dev/null)\" = {t} ] && "
                      f"[ \"$(cat \"$d/applying\" 2>/dev/null)\" = {t} ] && "
                      "rm -f \"$d/applying\"", check=True)

    def state_of(self, token: str) -> str:
        """Where arming `token` stands: armed, disarmed, fired (also when already seen) or
        none (not this host's latest arming / never armed)."""
        d = shlex.quote(self.dir)
        res = self.conn.run(f"d={d}; for s in armed disarmed fired seen; do "
                            f"[ \"$(cat \"$d/$s\" 2>/dev/null)\" = {token} ] && "
                            "{ echo $s; exit 0; }; done; echo none", check=True)
        state = res.stdout.strip()
        return "fired" if state == "seen" else state or "none"

    def restore_now(self) -> bool:
        """Run the restore script over SSH (the failure path); True when every command
        succeeded."""
        return self.conn.run(f"sh {shlex.quote(self.dir + '/restore.sh')}").ok


# ----------------------------------------------------------------------------- planning


def read_knobs(probe: HostProbe) -> dict[str, Any]:
    """Every knob value the backends manage on this host."""
    out: dict[str, Any] = {}
    for b in backends():
        out.update(b.read(probe))
    return out


def plan_changes(ctx: HostContext, current: dict[str, Any],
                 targets: dict[str, Any] | None = None) -> tuple[list[Change], list[Note]]:
    """The change set in apply order (backends' targets, or the given `targets`: values
    read from the host, compared exactly, as are the backends' targets that are a knob's
    original value)."""
    changes: list[Change] = []
    notes: list[Note] = []
    for b in backends():
        if targets is None:
            wanted, found = b.plan(ctx)
            notes.extend(found)
        else:
            wanted = {k: v for k, v in targets.items() if split_key(k)[1] in names(b)}
        for knob, after in wanted.items():
            if knob not in current:
                continue  # the knob vanished (an IRQ line gone): nothing to set
            exact = targets is not None or after == ctx.original.get(knob)
            if not b.matches(knob, after, current[knob], exact=exact):
                changes.append(Change(knob, b.NAME, current[knob], after, exact))
    return changes, notes


def _mgmt_refusal(ctx: HostContext, changes: list[Change]) -> str:
    """Why a guarded change may cut the SSH session ("" if none can): it touches the
    interface carrying it or a device under it (VLAN parent, bond slave, bridge port), or
    that interface is unknown."""
    mgmt, ssh = ctx.probe.mgmt_ifaces, ctx.probe.ssh_iface
    for c in changes:
        nic = split_key(c.knob)[0]
        if not nic or not getattr(backend(c.backend), "MGMT_GUARDED", False):
            continue
        iface = ctx.host.nics.get(nic)
        what = f"{c.backend} change on {iface} ({c.knob}: {c.before} -> {c.after})"
        if mgmt is None:
            return (f"{what}: cannot tell which interface carries the SSH session (no "
                    "$SSH_CONNECTION, no `ip` output, or no interface holds its address); "
                    "pass --allow-mgmt-iface")
        if iface in mgmt:
            under = "" if iface == ssh else f" (it is under {ssh}, which does)"
            return (f"{what} would touch the interface carrying the SSH session{under}; "
                    "pass --allow-mgmt-iface")
    return ""


# ----------------------------------------------------------------------------- transaction


@dataclass
class Options:
    dry_run: bool = False
    allow_mgmt_iface: bool = False
    confirm_timeout: float | None = None
    guard_timeout: float = GUARD_TIMEOUT
    trust_on_first_use: bool = False


def _audit(host: HostInventory) -> AuditLog:
    return AuditLog(host.state_dir / "audit.jsonl")


def _verify(conn: Connection, changes: list[Change], field_: str,
            notes: list[Note] | None = None) -> list[str]:
    """Mismatches between the host's knobs and each change's `field_` value; values the
    kernel rounded (accepted by the backend's `matches`) are added to `notes`. A read-back
    that cannot be read or compared is a ProbeError: the host counts as not verified (the
    caller restores), never as a crash that skips the restore. Values read from the host
    (every "before"; an "after" that is a snapshot's, as in a rollback) must read back
    exactly."""
    try:
        got = read_knobs(probe_host(conn))
        bad = []
        for c in changes:
            want, have = getattr(c, field_), got.get(c.knob)
            exact = field_ == "before" or c.exact
            if not backend(c.backend).matches(c.knob, want, have, exact=exact):
                bad.append(f"{c.knob}: wanted {want!r}, reads {have!r}")
            elif notes is not None and want != have and c.backend == "ring":
                nic = split_key(c.knob)[0]
                notes.append(Note(conn.host.name, nic, c.backend, "rounded",
                                  f"the driver set {have} for {want}"))
    except UNREADABLE as exc:
        raise ProbeError(conn.host.name, f"read-back unreadable: {type(exc).__name__}: "
                                         f"{exc}") from exc
    return bad


def _transact(conn: Connection, ctx: HostContext, changes: list[Change], notes: list[Note],
              opts: Options, action: str, started: float) -> HostResult:
    host = ctx.host
    result = HostResult(host.name, "applied", True, changes, notes)
    refusal = "" if opts.allow_mgmt_iface else _mgmt_refusal(ctx, changes)
    if refusal:
        result.status, result.ok, result.error = "refused", False, refusal
    elif opts.dry_run:
        result.status = "dry-run"
    elif not changes:
        result.status = "unchanged"
    else:
        _run_changes(conn, ctx, changes, opts, action, result)
    result.seconds = time.monotonic() - started
    return result


def _run_changes(conn: Connection, ctx: HostContext, changes: list[Change], opts: Options,
                 action: str, result: HostResult) -> None:
    host, audit, wd = ctx.host, _audit(ctx.host), Watchdog(conn)
    order = [b for b in backends() if any(c.backend in names(b) for c in changes)]

    def values(b: Any, which: str) -> dict[str, Any]:
        return {c.knob: getattr(c, which) for c in changes if c.backend in names(b)}

    restore = [cmd for b in reversed(order) for cmd in b.commands(ctx, values(b, "before"))]
    seconds = opts.confirm_timeout or opts.guard_timeout
    steps = [(b, cmd) for b in order for cmd in b.commands(ctx, values(b, "after"))]
    result.token = uuid.uuid4().hex
    try:
        res = wd.arm(restore, seconds, result.token,
                     then=_steps_script([cmd for _, cmd in steps]))
        done, error = _steps_outcome(res, len(steps))
        finished = {b.NAME for b in order} - {b.NAME for b, _ in steps[done:]}
        for c in changes:
            if backend(c.backend).NAME in finished:
                audit.write(host.name, c.knob, c.before, c.after, action)
        if error:
            b, cmd = steps[done]
            raise ApplyFailed(f"{b.NAME}: {cmd[:160]!r} failed: {error}")
        _fire_hook("verify", conn)
        bad = _verify(conn, changes, "after", result.notes)
        if bad:
            raise ApplyFailed("read-back differs: " + "; ".join(bad[:3]))
    except (ApplyFailed, ProbeError) as exc:  # the session works: restore now
        _restore_after_failure(conn, wd, changes, result, str(exc), audit, seconds)
        return
    except ArmFailed as exc:
        result.status, result.ok, result.error = "failed", False, str(exc)
        return
    except HostError as exc:
        _recover_lost_session(conn, ctx, result, str(exc), seconds, opts, disarming=False)
        return
    if opts.confirm_timeout:
        try:
            wd.mark_verified(result.token)
        except HostError as exc:  # not marked: --confirm would refuse it; let the timer act
            _recover_lost_session(conn, ctx, result, str(exc), seconds, opts, disarming=False)
            return
        result.status = "pending-confirm"
        return
    try:
        _fire_hook("disarm", conn)
        state = wd.disarm(result.token)
    except HostError as exc:  # did the disarm reach the host? only the host knows
        _recover_lost_session(conn, ctx, result, str(exc), seconds, opts, disarming=True)
        return
    if state == "fired":
        # The timer's restore may have raced with the apply: let it finish, then restore
        # once more ourselves (idempotent) and verify.
        _timer_restore(conn)
        _restore_after_failure(conn, wd, changes, result, "the on-host timer fired before it "
                               "was disarmed (the host was slower than --guard-timeout)",
                               audit, None)
    elif state == "none":  # applied and verified, but another run's arming replaced ours
        result.notes.append(Note(host.name, "", "timer", "warning",
                                 "this deploy's on-host timer was no longer armed when it was "
                                 "to be disarmed: another nictune run armed its own meanwhile "
                                 "(that run's timer may still restore the host)"))


# Test hooks: {point: callable(conn)} run just before the named step ("verify": after the
# apply steps returned, "disarm": after the read-back verified). Tests use them to break
# the session at a precise point; empty in normal runs.
FAULT_HOOKS: dict[str, Any] = {}


def _fire_hook(point: str, conn: Connection) -> None:
    hook = FAULT_HOOKS.get(point)
    if hook is not None:
        hook(conn)


def _steps_script(commands: list[str]) -> str:
    """Commands run in order, stopping at the first failure, with progress markers."""
    return "".join(f"{{ {cmd} ; }} 2>&1 || {{ echo '@@failed {i}'; exit 1; }}\n"
                   f"echo '@@done {i}'\n" for i, cmd in enumerate(commands))


def _steps_outcome(res: CommandResult, count: int) -> tuple[int, str]:
    """(number of commands that succeeded, error text of the failed one or "")."""
    done = sum(1 for line in res.stdout.splitlines() if line.startswith("@@done "))
    if res.ok and done == count:
        return done, ""
    tail = [x for x in res.stdout.splitlines() if x.strip() and not x.startswith("@@")]
    return done, " ".join(tail[-2:]) or res.error_line()


def _restore_after_failure(conn: Connection, wd: Watchdog, changes: list[Change],
                           result: HostResult, error: str, audit: AuditLog,
                           timer: float | None) -> None:
    """Restore over SSH and verify; the timer (armed for `timer` s, None: not armed) is
    disarmed only once the restore is verified, so an unverified restore is retried by it."""
    result.status, result.ok, result.error = "restored", False, error
    retry = f"; the on-host timer restores again within {timer:g} s" if timer else ""
    try:
        wd.restore_now()
        bad = _verify(conn, changes, "before")
    except HostError as exc:  # the probe or the session failed: the host's state is unknown
        result.status, result.restore_verified = "failed", None
        result.error += f"; the restore could not be verified ({exc.reason}){retry}"
        return
    result.restore_verified = not bad
    if bad:
        result.status = "failed"
        result.error += "; RESTORE INCOMPLETE: " + "; ".join(bad[:3]) + retry
    elif timer:  # on a broken session the timer re-runs the same restore (a no-op)
        with contextlib.suppress(HostError):
            wd.disarm(result.token)
    for c in changes:
        audit.write(result.host, c.knob, c.after, c.before, "restore", not bad)


def _recover_lost_session(conn: Connection, ctx: HostContext, result: HostResult, error: str,
                          seconds: float, opts: Options, disarming: bool) -> None:
    """The session broke (or a command timed out) after the timer was armed. Before the
    disarm the timer restores the host within `seconds`; during the disarm nobody but the
    host knows whether it was applied ("unknown"). Reconnect once and settle it."""
    conn.abort()  # discard unsent commands: none may reach the host late
    if disarming:
        result.status, result.ok = "unknown", False
        result.error = (f"{error}; the session broke while disarming the on-host timer: the "
                        "host is fully applied if the disarm reached it, else its timer "
                        f"restores it within {seconds:g} s; reconnect to tell (resolve_host)")
    else:
        result.status, result.ok = "failed", False
        result.error = (f"{error}; the on-host timer restores the pre-deploy state within "
                        f"{seconds:g} s")
    try:
        with Connection(ctx.host, trust_on_first_use=opts.trust_on_first_use,
                        connect_timeout=3.0) as again:
            _settle(again, result, error)
    except HostError:
        pass


def _settle(conn: Connection, result: HostResult, error: str) -> None:
    """Find out, over a new session, what became of the arming `result.token`, and make
    the result say it: applied (disarmed and verified), or restored and verified."""
    wd, audit = Watchdog(conn), _audit(conn.host)
    state = wd.state_of(result.token)
    if state == "disarmed":
        bad = _verify(conn, result.changes, "after")
        if not bad:
            result.status, result.ok = "applied", True
            result.error = ""
            result.notes.append(Note(result.host, "", "transaction", "session-lost",
                                     f"{error}; reconnected: the disarm had reached the host "
                                     "and the read-back matches the plan"))
            return
        why = f"{error}; reconnected: read-back differs: " + "; ".join(bad[:3])
        _restore_after_failure(conn, wd, result.changes, result, why, audit, None)
    elif state == "armed":
        _restore_after_failure(conn, wd, result.changes, result,
                               f"{error} (reconnected and restored)", audit,
                               GUARD_TIMEOUT)
    elif state == "fired":
        _timer_restore(conn)
        _restore_after_failure(conn, wd, result.changes, result,
                               f"{error} (the on-host timer restored; reconnected and "
                               "verified)", audit, None)
    else:  # the arming never reached the host: nothing was changed
        bad = _verify(conn, result.changes, "before")
        if not bad:
            result.status, result.restore_verified = "restored", True
            result.error = f"{error} (reconnected: nothing had been changed)"


def resolve_host(conn: Connection, result: HostResult) -> HostResult:
    """Settle a result whose outcome the client could not know (status "unknown": the
    session broke during the disarm) by asking the host; other results are returned as
    they are."""
    if result.status == "unknown" and result.token:
        _settle(conn, result, result.error.split("; the session broke")[0])
    return result


def apply_host(conn: Connection, host: HostInventory, settings: dict[str, NicSetting],
               opts: Options | None = None) -> HostResult:
    """Bring `host` to the given settings ({NIC id: NicSetting}) — transactionally."""
    opts, started = opts or Options(), time.monotonic()
    for nic in settings:
        host.iface(nic)  # unknown NIC ids are refused before anything runs
    probe = probe_host(conn)
    # (read after the probe: another deploy writes its snapshot before it changes
    # anything, so tuned values the probe saw come with that snapshot, never in place of
    # it — read first, they were saved as the original and rollback restored nothing)
    saved = read_snapshot(host.state_dir, host.name)
    mismatch, notes = snapshot_mismatch(saved, host, probe, rollback=False)
    if mismatch:
        return _refused(host, mismatch, notes, started)
    if not opts.dry_run:
        pending, found = _check_watchdog(conn, probe.timer)
        notes += found
        if pending:
            return _refused(host, pending, notes, started)
    gone = [f"{n} ({probe.nics[n].iface})" for n in settings if not probe.nics[n].exists]
    if gone:
        return HostResult(host.name, "failed", False, notes=notes, error=f"no such interface: "
                          f"{', '.join(gone)}", seconds=time.monotonic() - started)
    current = read_knobs(probe)
    ctx = HostContext(host, probe, merge_snapshot(saved, current), dict(settings))
    changes, found = plan_changes(ctx, current)
    if not opts.dry_run and (opts.allow_mgmt_iface or not _mgmt_refusal(ctx, changes)):
        # (saved before any change; not by a deploy the guard refuses, which changes
        # nothing: its snapshot stood for "the original" at the next deploy)
        ensure_snapshot(host, probe, saved, current)
    result = _transact(conn, ctx, changes, notes + found, opts, "apply", started)
    if saved is None and result.status == "restored" and result.restore_verified:
        # the snapshot this deploy took, and its own change undone and verified: kept, it
        # stood for "the original" at the next deploy, over what the host had by then
        # (a review's case: the admin's later pf_ring.conf lost a key, then was deleted
        # by a rollback)
        archive_snapshot(host.state_dir, host.name, "restored")
    return result


def _refused(host: HostInventory, why: str, notes: list[Note], started: float) -> HostResult:
    return HostResult(host.name, "refused", False, notes=notes, error=why,
                      seconds=time.monotonic() - started)


def _check_watchdog(conn: Connection, state: str, supersede: bool = False,
                    own: bool = False) -> tuple[str, list[Note]]:
    """Refusal text when the on-host timer is armed (else ""): a deploy awaiting
    confirmation — unless `supersede` (a rollback), which disarms it — one still applying
    or cut short, whose timer will restore the host, or one cut short whose timer is gone
    (a rollback disarms that one too) — unless `own` (validation putting back its own
    arm cut short); and a warning note when an earlier deploy's timer fired and its
    restore script failed. `state` is the probe's: a timer that fired or was disarmed
    since is a refusal too (what the probe read is no longer the host)."""
    if state == "armed":
        wd = Watchdog(conn)
        if own:
            wd.disarm()
            return "", []
        arming = wd.disarm(verified=True, stale=True) if supersede else wd.arming()
        if arming == "disarmed":
            return "", []
        if arming == "unverified":
            return ("another deploy is applying its change on this host, or was cut short "
                    "(its on-host timer restores the host); try again when it has ended"), []
        if arming == "stale":
            return ("a deploy was cut short on this host and its on-host timer is gone (the "
                    "host rebooted, or the timer was killed): run `nictune rollback` to "
                    "return it to the snapshot"), []
        if arming == "verified":
            return ("an earlier deploy awaits confirmation on this host; run `nictune deploy "
                    "--confirm` or wait for its timer to restore the host"), []
        if arming == "fired":
            _timer_restore(conn)
        return ("the on-host timer fired or was disarmed while this run read the host: "
                "what it read is no longer the host's state; run it again"), []
    done = _timer_restore(conn) if state == "fired" else None
    if done is None or done.ok:
        return "", []
    return "", [Note(conn.host.name, "", "timer", "warning",
                     f"an earlier deploy's on-host timer fired and its restore FAILED "
                     f"({done.describe()}): the host may have been half-restored; `nictune "
                     "rollback` returns it to the snapshot")]


def _timer_restore(conn: Connection) -> TimerRestore | None:
    """Collect a fired timer's restore (`Watchdog.collect`) and write its audit line."""
    done = Watchdog(conn).collect()
    if done is not None:
        _audit(conn.host).write(conn.host.name, "*", None, None, "timer-restore", done.ok,
                                detail=f"the on-host timer ran the restore script "
                                       f"({done.describe()})")
    return done


def restore_host(conn: Connection, host: HostInventory, opts: Options | None = None,
                 own: bool = False) -> HostResult:
    """Return `host` to its original snapshot (rollback) and archive the snapshot. `own`:
    an armed timer is the caller's own arm, cut short (validation, calibration)."""
    opts, started = opts or Options(), time.monotonic()
    saved = read_snapshot(host.state_dir, host.name)
    if saved is None:
        return HostResult(host.name, "no-snapshot", True,
                          error="no snapshot: nictune never changed this host",
                          seconds=time.monotonic() - started)
    probe = probe_host(conn)
    mismatch, notes = snapshot_mismatch(saved, host, probe, rollback=True)
    if mismatch:
        return _refused(host, mismatch, notes, started)
    current, original = read_knobs(probe), saved.knobs
    missing = sorted(set(original) - set(current))
    held = [k for k in missing if split_key(k)[1] in STEADY
            and probe.nics.get(split_key(k)[0]) is not None
            and probe.nics[split_key(k)[0]].exists]
    if held:  # (a read that failed: restoring the rest and archiving left that one tuned;
        # checked before a pending timer is disarmed, which the refusal must leave armed)
        return _refused(host, f"the host no longer reports {len(held)} snapshot knobs of "
                              f"NICs it still has (e.g. {held[0]}); nothing was changed and "
                              f"the snapshot {saved.path} is kept: run rollback again, or "
                              "remove those knobs from it if the NIC really lost them",
                        notes, started)
    if not opts.dry_run:  # a rollback supersedes a deploy awaiting confirmation
        pending, found = _check_watchdog(conn, probe.timer, supersede=True, own=own)
        notes += found
        if pending:  # (never one still applying: rolled back under it, it left the host
            return _refused(host, pending, notes, started)  # tuned with no snapshot)
    ctx = HostContext(host, probe, original, {})
    changes, found = plan_changes(ctx, current, targets=original)
    notes += found
    if missing:
        notes.append(Note(host.name, "", "rollback", "warning",
                          f"{len(missing)} snapshot knobs no longer exist (e.g. {missing[0]})"))
    opts = Options(dry_run=opts.dry_run, allow_mgmt_iface=True,
                   guard_timeout=opts.guard_timeout,
                   trust_on_first_use=opts.trust_on_first_use)
    result = _transact(conn, ctx, changes, notes, opts, "rollback", started)
    if result.ok and not opts.dry_run:
        result.status = "rolled-back"
        archive_snapshot(host.state_dir, host.name)
    return result


def apply_knobs(conn: Connection, host: HostInventory, knobs: dict[str, Any],
                own: bool = False) -> HostResult:
    """Set the host's knobs back to `knobs` (as `read_knobs` gave them), transactionally.

    For callers that saved a host's state themselves (validation returns a host that had a
    nictune deployment to it); the original snapshot is left as it is. An armed timer is
    another deploy's, and a change is refused while it is (overwriting its restore script
    would disarm that guard) — unless `own`: the caller knows the timer is its own, left by
    an apply it cut short, and disarms it."""
    started = time.monotonic()
    probe = probe_host(conn)
    ctx = HostContext(host, probe, knobs, {})
    changes, found = plan_changes(ctx, read_knobs(probe), targets=knobs)
    pending, notes = _check_watchdog(conn, probe.timer, own=own)
    if pending and changes:
        return _refused(host, pending, notes, started)
    return _transact(conn, ctx, changes, notes + found, Options(allow_mgmt_iface=True),
                     "restore", started)


def confirm_host(conn: Connection, host: HostInventory) -> HostResult:
    """Disarm the timer of a `--confirm-timeout` deploy: the change stays."""
    started = time.monotonic()
    state = Watchdog(conn).disarm(verified=True)
    if state == "stale":  # (nothing to confirm, and no timer to restore the host)
        result = HostResult(host.name, "failed", False,
                            error="the deploy that armed this host's timer never verified "
                                  "its change and the timer is gone (the host rebooted?): "
                                  "nothing to confirm; run `nictune rollback`")
    elif state == "disarmed":
        _audit(host).write(host.name, "*", None, None, "confirm")
        result = HostResult(host.name, "confirmed", True)
    elif state == "fired":
        result = _too_late(conn)
    elif state == "unverified":  # (confirming kept a half-applied host)
        result = HostResult(host.name, "failed", False,
                            error="the deploy that armed this host's timer never verified "
                                  "its change (still applying, or cut short): nothing to "
                                  "confirm; its on-host timer restores the host")
    else:
        result = HostResult(host.name, "unchanged", True, error="nothing awaited confirmation")
    result.seconds = time.monotonic() - started
    return result


def _too_late(conn: Connection) -> HostResult:
    """A confirm after the timer fired: restored, or failed if its restore script failed."""
    done = _timer_restore(conn)
    if done is not None and not done.ok:
        return HostResult(conn.host.name, "failed", False, restore_verified=False,
                          error=f"too late: the on-host timer fired and its restore FAILED "
                                f"({done.describe()}); the host may be half-restored: run "
                                "`nictune rollback`")
    return HostResult(conn.host.name, "restored", False,
                      error="too late: the timer already restored the pre-deploy state")
