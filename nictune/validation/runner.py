"""A/B validation: per transmission, arms `default` and `optimized` interleaved.

For each transmission of the plan: A B A B … for N repeats, each arm applied to the
receiving host through the deployer (`apply_host`: snapshot, apply, verify by read-back),
then one measured run (agent + hping3 + counters). The default arm is the plan's
`default_setting` (the configured default the model predicted for), the optimized arm its
`setting`. At the end every receiver is put back: a host that had no nictune snapshot
before validation is restored to it (`restore_host`); one that had (a plan was deployed
before) gets its pre-validation knob values back through the same transaction.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nictune.deploy import transaction as tx
from nictune.deploy.inventory import HostInventory, Inventory, check_plan_nics
from nictune.deploy.probe import capture_profile_path, probe_host
from nictune.deploy.transport import Connection
from nictune.errors import InputError, RunError
from nictune.plan import Plan, PlanEntry
from nictune.validation import remote, traffic

ARMS = ("default", "optimized")
BASE_PORT = 20000
NOTE_KINDS = ("unsupported", "not_expressible", "unavailable", "clamped", "rounded",
              "approximation")


@dataclass
class Options:
    transmissions: list[str] = field(default_factory=list)
    repeats: int = 5
    scale: float | None = None
    duration: float | None = None
    max_rate: float | None = None  # cap on the paced rate (pps)


@dataclass
class _Host:
    conn: Connection
    host: HostInventory
    had_snapshot: bool
    before: dict[str, Any]
    timer: str = "none"  # the on-host timer at the start: "armed" is an operator's deploy


def _check(opts: Options) -> None:
    if opts.repeats < 1:
        raise InputError(f"--repeats: expected a whole number >= 1, got {opts.repeats}")
    if opts.scale is not None and opts.duration is not None:
        raise InputError("--scale and --duration exclude each other")


def _entries(plan: Plan, opts: Options) -> list[PlanEntry]:
    if not opts.transmissions:
        return list(plan.entries)
    return [plan.entry(t) for t in dict.fromkeys(opts.transmissions)]


def _put_back(h: _Host) -> tx.HostResult:
    """Return a receiver to its pre-validation state (see the module docstring), over a
    new session if the run lost its own."""
    h.conn.reconnect_if_lost()
    if not h.had_snapshot:
        return tx.restore_host(h.conn, h.host, own=h.timer != "armed")
    # a timer armed now but not at the start is an arm's own, cut short (Ctrl-C)
    return tx.apply_knobs(h.conn, h.host, h.before, own=h.timer != "armed")


@contextlib.contextmanager
def _receivers(inventory: Inventory, names: list[str],
               restored: dict[str, str]) -> Iterator[dict[str, _Host]]:
    """Connections to the receivers; each is put back at the end, its outcome in `restored`."""
    hosts: dict[str, _Host] = {}
    try:
        for name in names:
            host = inventory.hosts[name]
            conn = Connection(host).connect()
            had = tx.load_snapshot(host.state_dir, host.name) is not None
            probe = probe_host(conn) if had else None
            hosts[name] = _Host(conn, host, had, tx.read_knobs(probe) if probe else {},
                                probe.timer if probe else "none")
        yield hosts
    finally:
        interrupted = False
        for name, h in hosts.items():
            try:
                res = _put_back(h)
                restored[name] = res.status if res.ok else f"FAILED: {res.error or res.status}"
            except KeyboardInterrupt:  # (Ctrl-C again: this host is named, the others
                interrupted = True     # are still put back, then the interrupt goes on)
                restored[name] = "FAILED: interrupted while putting it back"
            except Exception as exc:  # reported; the other hosts are still restored
                restored[name] = f"FAILED: {exc}"
            finally:
                h.conn.close()
        if interrupted:
            raise KeyboardInterrupt


def unrestored(restored: dict[str, str], inventory: Path | str) -> str:
    """What to tell the operator about receivers left with an arm's setting ('' if none)."""
    failed = {h: s.removeprefix("FAILED: ") for h, s in restored.items()
              if s.startswith("FAILED")}
    if not failed:
        return ""
    return ("could not restore " + "; ".join(f"{h}: {s}" for h, s in failed.items())
            + f" (run `nictune rollback --inventory {inventory} --hosts {' '.join(failed)}`)")


def _notes(result: tx.HostResult) -> list[dict[str, Any]]:
    return [n.to_json() for n in result.notes if n.kind in NOTE_KINDS]


def _experiment(e: PlanEntry, port: int, h: _Host, tx_conn: Connection, opts: Options,
                deploy_notes: dict[str, list[dict[str, Any]]],
                progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """One transmission's runs: arms default and optimized, interleaved, `opts.repeats` each."""
    runs = []
    iface = h.host.iface(e.nic)
    with remote.Receiver.prepare(h.conn, h.host, iface) as rx:
        spec = traffic.spec_for(e, rx.address, port, opts.scale, opts.duration, opts.max_rate)
        profile = capture_profile_path(h.host, iface)
        for repeat in range(opts.repeats):
            for arm in ARMS:
                setting = e.setting if arm == "optimized" else e.default_setting
                progress(f"{e.id} {arm} run {repeat + 1}/{opts.repeats}: "
                         f"{setting.describe()}")
                applied = tx.apply_host(h.conn, h.host, {e.nic: setting})
                if not applied.ok:
                    raise RunError(f"{e.host}: applying the {arm} arm of {e.id} failed: "
                                   f"{applied.error or applied.status}")
                deploy_notes.setdefault(f"{e.id}/{arm}", _notes(applied))
                raw = remote.measure(rx, tx_conn, spec, ["--profile", profile],
                                     f"{e.id}-{arm}-{repeat}")
                runs.append({"transmission": e.id, "arm": arm, "repeat": repeat,
                             "setting": setting.to_json(), "deploy": applied.status,
                             **remote.derive(raw), "raw": raw})
    return runs


def validate(plan: Plan, inventory: Inventory, sender: str, opts: Options,
             progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run the A/B experiment; returns the raw runs for `report.build`."""
    _check(opts)
    entries = _entries(plan, opts)
    if sender not in inventory.hosts:
        raise InputError(f"{inventory.path}: --sender: unknown host {sender!r} "
                         f"(hosts: {', '.join(inventory.hosts)})")
    check_plan_nics(inventory, [(e.host, e.nic) for e in entries], str(plan.source))
    if sender in {e.host for e in entries}:
        raise InputError(f"--sender {sender!r} is a receiver of the plan: validation measures "
                         "traffic that crosses a NIC from another host")
    for e in entries:  # bad scaling input fails before any connection
        traffic.spec_for(e, "0.0.0.0", 1, opts.scale, opts.duration, opts.max_rate)
    started = time.time()
    runs: list[dict[str, Any]] = []
    deploy_notes: dict[str, list[dict[str, Any]]] = {}
    restored: dict[str, str] = {}
    try:
        with Connection(inventory.hosts[sender]).connect() as tx_conn, \
                _receivers(inventory, sorted({e.host for e in entries}), restored) as hosts:
            for index, e in enumerate(entries):
                runs += _experiment(e, BASE_PORT + index, hosts[e.host], tx_conn, opts,
                                    deploy_notes, progress)
    except BaseException as exc:
        left = unrestored(restored, inventory.path)
        if left and isinstance(exc, RunError):
            raise RunError(f"{exc}; and {left}") from None
        if left:  # Ctrl-C: the CLI says "interrupted"; say what is left first
            progress(left)
        raise
    return {"plan": str(plan.source), "inventory": str(inventory.path), "sender": sender,
            "repeats": opts.repeats, "scale": opts.scale, "duration": opts.duration,
            "started": started, "wall_s": time.time() - started,
            "transmissions": [e.id for e in entries], "runs": runs,
            "deploy_notes": deploy_notes, "restored": restored}
