"""The host commands behind `nictune probe|deploy|rollback` (parsing lives in cli.py).

Everything the user typed (plan, inventory, host names, NIC ids) is validated before any
connection; each host then runs in the bounded pool and the result says which host
succeeded and why another failed. Exit code 0 when every host is ok, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from nictune.deploy.group import GroupInterrupted, GroupResult, run_group
from nictune.deploy.inventory import HostInventory, Inventory, check_plan_nics, load_inventory
from nictune.deploy.probe import HostProbe, probe_host
from nictune.deploy.transaction import HostResult, Options, apply_host, confirm_host, restore_host
from nictune.deploy.transport import Connection
from nictune.errors import InputError, one_line
from nictune.model import NicSetting
from nictune.plan import load_plan


def _connect(args: argparse.Namespace, host: HostInventory) -> Connection:
    return Connection(host, trust_on_first_use=args.trust_on_first_use)


def _run(args: argparse.Namespace, hosts: list[HostInventory],
         fn: Callable[[Connection, HostInventory], Any]) -> GroupResult[Any]:
    if args.workers < 1:
        raise InputError(f"--workers: expected at least 1, got {args.workers}")

    def one(host: HostInventory) -> Any:
        with _connect(args, host) as conn:
            return fn(conn, host)

    return run_group(hosts, one, workers=args.workers)


def _exit(group: GroupResult[Any]) -> int:
    """0 when every host is ok; 2 when a host failed on bad input (its output unreadable:
    DESIGN's exit codes), else 1."""
    if group.ok:
        return 0
    return 2 if any(o.exit_code == 2 for o in group.outcomes.values()) else 1


def _run_to_the_end(args: argparse.Namespace, hosts: list[HostInventory],
                    fn: Callable[[Connection, HostInventory], Any]) -> GroupResult[Any]:
    """`_run`; after Ctrl-C (running hosts finish, the others are not started) what
    finished, `interrupted` set."""
    try:
        return _run(args, hosts, fn)
    except GroupInterrupted as stop:
        return stop.result


def _finish(args: argparse.Namespace, group: GroupResult[Any]) -> int:
    """The exit code: 130 after Ctrl-C (saying which hosts were not started), else 0 or 1."""
    if group.interrupted:
        print(f"nictune {args.command}: interrupted; not started: "
              f"{', '.join(group.not_started) or 'none'}", file=sys.stderr)
        return 130
    return _exit(group)


def probe_cmd(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    hosts = inventory.select(args.hosts)
    group = _run_to_the_end(args, hosts, lambda conn, host: probe_host(conn))
    if args.json:
        print(json.dumps({**group.to_json(), "hosts": {
            h: (o.value.to_json() if o.value else {"error": o.error})
            for h, o in group.outcomes.items()}}, indent=1))
        return _finish(args, group)
    for name, outcome in group.outcomes.items():
        if not outcome.ok or outcome.value is None:
            print(f"{name}: FAILED: {one_line(outcome.error)}")
            continue
        _print_probe(outcome.value)
    return _finish(args, group)


def _print_probe(p: HostProbe) -> None:
    sysctls = ", ".join(f"{k}={'n/a' if v is None else v}" for k, v in p.sysctls.items())
    print(f"{p.host}: kernel {p.kernel}, {p.cpus} CPUs, {p.ethtool_version or 'no ethtool'}, "
          f"ssh via {p.ssh_iface or '?'}, irqbalance {'running' if p.irqbalance else 'off'}, "
          f"PF_RING {'loaded' if p.pfring_loaded else 'not loaded'}, busy poll: {sysctls}")
    for nic in p.nics.values():
        if not nic.exists:
            print(f"  {nic.nic} ({nic.iface}): MISSING")
            continue
        co = nic.coalesce
        coalesce = "unsupported" if co is None else \
            f"rx-usecs {co.get('rx-usecs')} rx-frames {co.get('rx-frames')} " \
            f"adaptive-rx {co.get('adaptive-rx')}"
        ring = "unsupported" if nic.ring is None else \
            f"{nic.ring['current'].get('rx')}/{nic.ring['max'].get('rx')}"
        ch = "unsupported" if nic.channels is None else ", ".join(
            f"{k} {v}" for k, v in nic.channels["current"].items() if v)
        gro = (nic.features or {}).get("generic-receive-offload", {}).get("active")
        print(f"  {nic.nic} ({nic.iface}): {nic.driver} {nic.driver_version}, "
              f"{nic.speed_mbps or '?'} Mb/s; coalesce {coalesce}; ring rx {ring}; "
              f"channels {ch}; gro {gro}; napi {nic.napi}; rps {nic.rps_cpus}; "
              f"irqs {nic.irq_affinity or 'none'}")


def _print_results(group: GroupResult[HostResult], verb: str) -> None:
    for name, outcome in group.outcomes.items():
        r = outcome.value
        if r is None:
            print(f"{name}: FAILED: {one_line(outcome.error)}")
            continue
        head = f"{name}: {r.status}" + (f" ({len(r.changes)} changes)" if r.changes else "")
        print(head + (f": {one_line(r.error)}" if r.error else ""))
        for c in r.changes:
            print(f"  {c.knob}: {_short(c.before)} -> {_short(c.after)}")
        for n in r.notes:
            print(f"  note: {one_line(n.describe())}")
    ok, stopped = group.succeeded, group.not_started
    print(f"{verb}: {len(ok)} of {len(group.outcomes) + len(stopped)} hosts ok" +
          (f"; failed: {', '.join(group.failed)}" if group.failed else "") +
          (f"; not started (interrupted): {', '.join(stopped)}" if stopped else ""))


def _short(value: Any) -> str:
    text = one_line(json.dumps(value) if not isinstance(value, str) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _results_json(group: GroupResult[HostResult], wall: float) -> str:
    return json.dumps({**group.to_json(), "wall_s": round(wall, 3), "hosts": {
        h: (o.value or HostResult(h, "failed", False, error=o.error)).to_json()
        for h, o in group.outcomes.items()}}, indent=1)


def plan_settings(plan_path: str, inventory: Inventory) -> dict[str, dict[str, NicSetting]]:
    """{host: {nic: setting}} from a plan, checked against the inventory (exit 2 if not)."""
    plan = load_plan(plan_path)
    settings = plan.nic_settings()
    check_plan_nics(inventory, settings, source=plan_path)
    out: dict[str, dict[str, NicSetting]] = {}
    for (host, nic), setting in settings.items():
        out.setdefault(host, {})[nic] = setting
    return out


def deploy_cmd(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    started = time.monotonic()
    if args.confirm:
        if args.plan or args.dry_run or args.confirm_timeout:
            raise InputError("--confirm takes only --inventory and --hosts (no plan)")
        hosts, fn = inventory.select(args.hosts), confirm_host
    else:
        if not args.plan:
            raise InputError("a plan file is required (or --confirm)")
        per_host = plan_settings(args.plan, inventory)
        hosts = [h for h in inventory.select(args.hosts) if h.name in per_host]
        if not hosts:
            among = " ".join(args.hosts or [])
            raise InputError(f"{args.plan}: no plan host among --hosts {among}")
        opts = Options(dry_run=args.dry_run, allow_mgmt_iface=args.allow_mgmt_iface,
                       confirm_timeout=args.confirm_timeout, guard_timeout=args.guard_timeout,
                       trust_on_first_use=args.trust_on_first_use)

        def fn(conn: Connection, host: HostInventory) -> HostResult:
            return apply_host(conn, host, per_host[host.name], opts)

    verb = "confirm" if args.confirm else "dry run" if args.dry_run else "deploy"
    return _report(args, verb, started, hosts, fn)


def rollback_cmd(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    started = time.monotonic()
    opts = Options(dry_run=args.dry_run, guard_timeout=args.guard_timeout,
                   trust_on_first_use=args.trust_on_first_use)
    return _report(args, "rollback", started, inventory.select(args.hosts),
                   lambda conn, host: restore_host(conn, host, opts))


def _report(args: argparse.Namespace, verb: str, started: float, hosts: list[HostInventory],
            fn: Callable[[Connection, HostInventory], HostResult]) -> int:
    """Run `fn` on the hosts and print the results (after Ctrl-C: what finished, and 130)."""
    group = _run_to_the_end(args, hosts, fn)
    if args.json:
        print(_results_json(group, time.monotonic() - started))
    else:
        _print_results(group, verb)
    return _finish(args, group)
