"""`nictune lab up|down`, `nictune probe`, `nictune deploy`, `nictune rollback`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nictune.argtypes import number, out_dir
from nictune.deploy import hosts_cli, lab


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="a local testbed of network-namespace hosts with sshd")
    lab_sub = p.add_subparsers(dest="lab_command", metavar="up|down")
    lab_sub.required = True
    up = lab_sub.add_parser("up", help="create the lab hosts and write the inventory")
    up.add_argument("--hosts", type=int, default=3,
                    help="number of hosts: sender + (N-1) receivers (default 3)")
    up.add_argument("--dir", type=out_dir, default="nictune-lab",
                    help="lab directory (default nictune-lab)")
    up.add_argument("--prefix", help="lab id (1-8 of a-z0-9) instead of a hash of --dir")
    up.add_argument("--json", action="store_true", help="print the lab as JSON")
    up.set_defaults(func=_lab_up)
    down = lab_sub.add_parser("down", help="remove everything `lab up` made")
    down.add_argument("--dir", default="nictune-lab", help="lab directory (default nictune-lab)")
    down.add_argument("--prefix", help="lab id: remove its namespaces and what runs in them "
                                       "without a lab directory (one deleted or unknown)")
    down.set_defaults(func=_lab_down)
    register_hosts(sub)


def _lab_up(args: argparse.Namespace) -> int:
    made = lab.lab_up(Path(args.dir), hosts=args.hosts, prefix=args.prefix)
    if args.json:
        print(json.dumps({**made.to_json(), "inventory": str(made.inventory),
                          "config": str(made.config)}, indent=2))
        return 0
    print(f"lab {made.id} up in {made.dir}: {len(made.hosts)} hosts")
    for h in made.hosts:
        nics = ", ".join(f"{n}={i}" for n, i in h.nics.items())
        print(f"  {h.name:<8} netns {h.netns:<16} ssh {h.address}  nics {nics}")
    print(f"inventory: {made.inventory}\nconfig:    {made.config}")
    return 0


def _lab_down(args: argparse.Namespace) -> int:
    removed = (lab.lab_down_prefix(args.prefix) if args.prefix is not None
               else lab.lab_down(Path(args.dir)))
    print(f"lab down: removed {len(removed)} items")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inventory", required=True, help="inventory.yaml (docs/deploy.md, Inventory)")
    p.add_argument("--hosts", nargs="+", action="extend", metavar="HOST",
                   help="only these inventory hosts (default: all; given twice: both lists)")
    p.add_argument("--trust-on-first-use", action="store_true",
                   help="accept and record unknown host keys (changed keys are always refused)")
    p.add_argument("--workers", type=int, default=16, help="hosts handled at once (default 16)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


_SECONDS = number(1.0, 86400.0, " s")  # the on-host timers


def register_hosts(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="read NIC, NAPI, IRQ, busy-poll and PF_RING state")
    _common(p)
    p.set_defaults(func=hosts_cli.probe_cmd)
    p = sub.add_parser("deploy", help="apply a plan to hosts: snapshot, apply, verify, or "
                                      "restore")
    p.add_argument("plan", nargs="?", help="plan.yaml (not needed with --confirm)")
    _common(p)
    p.add_argument("--dry-run", action="store_true", help="print the changes, touch nothing")
    p.add_argument("--confirm-timeout", type=_SECONDS, metavar="S",
                   help="restore automatically after S seconds unless `deploy --confirm` "
                        "(default: off, the change stays)")
    p.add_argument("--confirm", action="store_true",
                   help="confirm a --confirm-timeout deploy (keeps the change)")
    p.add_argument("--allow-mgmt-iface", action="store_true",
                   help="allow ring/channel changes on the interface carrying SSH")
    p.add_argument("--guard-timeout", type=_SECONDS, default=60.0, metavar="S",
                   help="on-host timer restoring an interrupted deploy (default 60 s)")
    p.set_defaults(func=hosts_cli.deploy_cmd)
    p = sub.add_parser("rollback", help="restore the hosts' original snapshots")
    _common(p)
    p.add_argument("--dry-run", action="store_true", help="print the changes, touch nothing")
    p.add_argument("--guard-timeout", type=_SECONDS, default=60.0, metavar="S",
                   help="on-host timer restoring an interrupted rollback (default 60 s)")
    p.set_defaults(func=hosts_cli.rollback_cmd)
