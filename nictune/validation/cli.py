"""`nictune validate` and `nictune calibrate` (docs/validate.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nictune.argtypes import count, number, out_dir, out_file
from nictune.deploy.inventory import load_inventory
from nictune.errors import RunError
from nictune.plan import load_plan

_SCALE = number(1e-6, 1.0)
_SECONDS = number(1e-3, 86400.0, " s")
_RATE = number(1.0, 1e9, " packets/s")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate", help="measure a plan against the default setting on real hosts (A/B)",
        description="Per transmission, apply the default and the optimized setting in turn "
                    "(A B A B ...), send the transmission's traffic with hping3, count it on "
                    "the receiver, and report throughput, interrupts, CPU with 95 % CIs.")
    p.add_argument("plan", help="plan.yaml from `nictune optimize`")
    p.add_argument("--inventory", required=True, help="inventory.yaml (docs/deploy.md, Inventory)")
    p.add_argument("--sender", required=True, help="inventory host that runs hping3")
    p.add_argument("--transmissions", nargs="+", action="extend", metavar="ID", default=[],
                   help="only these transmissions (default: all of the plan)")
    p.add_argument("--repeats", type=count(1), default=5, help="runs per arm (default 5)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--scale", type=_SCALE, help="fraction of each transmission's "
                      "packets to send (default 1: the whole transmission)")
    size.add_argument("--duration", type=_SECONDS, help="send each run for this many "
                      "seconds at the transmission's rate instead")
    p.add_argument("--max-rate", type=_RATE, help="cap the paced rate (packets/s)")
    p.add_argument("--out", type=out_dir, default="validation",
                   help="report directory (default ./validation)")
    p.add_argument("--json", action="store_true", help="print the report summary as JSON")
    p.set_defaults(func=run_validate)

    c = subparsers.add_parser(
        "calibrate", help="fit a host cost profile (irq, per_packet, per_byte) from measurements",
        description="Sweep modes, rates and packet sizes between two hosts, fit the receive "
                    "cost profile by least squares and write a host profile YAML.")
    c.add_argument("--inventory", required=True,
                   help="inventory.yaml (docs/deploy.md, Inventory)")
    c.add_argument("--sender", required=True, metavar="HOST",
                   help="the inventory host that sends with hping3")
    c.add_argument("--receiver", required=True, metavar="HOST",
                   help="the inventory host whose costs are fitted")
    c.add_argument("--nic", help="the receiver's NIC id (default: its only/first NIC)")
    c.add_argument("--out", type=out_file, default="host-profile.yaml",
                   help="profile YAML to write (default host-profile.yaml)")
    c.add_argument("--seconds", type=_SECONDS, default=1.0,
                   help="sending time per sweep point: packets = rate x seconds (default 1)")
    c.add_argument("--rates", type=_RATE, nargs="+",
                   help="packet rates to sweep (pps; default 2000 5000 10000; at least two "
                        "that send different packet counts)")
    c.add_argument("--sizes", type=count(1), nargs="+",
                   help="packet sizes (IP bytes, 64..9000; default 200 1400; at least two)")
    c.add_argument("--modes", nargs="+", help="modes to sweep (default all four; at least two "
                   "of active_wait, passive_wait, watermark)")
    c.add_argument("--repeats", type=count(1), default=1,
                   help="runs per sweep point (default 1)")
    c.add_argument("--json", action="store_true", help="print the fit and errors as JSON")
    c.set_defaults(func=run_calibrate)


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def run_validate(args: argparse.Namespace) -> int:
    from nictune.validation import calibrate, report, runner

    plan = load_plan(args.plan, require=("default_setting", "packet_size"))
    inventory = load_inventory(args.inventory)
    opts = runner.Options(transmissions=args.transmissions, repeats=args.repeats,
                          scale=args.scale, duration=args.duration, max_rate=args.max_rate)
    result = runner.validate(plan, inventory, args.sender, opts, progress=_progress)
    doc = report.build(result, plan, calibrate.repredict(plan, result))
    paths = report.write(doc, Path(args.out))
    if args.json:
        print(json.dumps({"report": str(paths["json"]), "wall_s": doc["wall_s"],
                          "transmissions": [{k: t[k] for k in (
                              "transmission", "comparisons", "limited_by", "predicted")}
                              for t in doc["transmissions"]]}, default=float))
    else:
        print(report.markdown(doc).split("## Predicted")[0].rstrip())
        print(f"\nreport: {paths['md']}  {paths['html']}  {paths['json']}")
    left = runner.unrestored(result["restored"], inventory.path)
    if left:
        raise RunError(f"measured, but {left}")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from nictune.validation import calibrate

    inventory = load_inventory(args.inventory)
    opts = calibrate.Options(seconds=args.seconds, rates=args.rates, sizes=args.sizes,
                             modes=args.modes, repeats=args.repeats, nic=args.nic)
    result = calibrate.calibrate(inventory, args.sender, args.receiver, opts,
                                 progress=_progress)
    calibrate.write_profile(result, Path(args.out))
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "points"}, default=float))
    else:
        print(calibrate.summary(result))
        print(f"\nprofile: {args.out}")
    return 0
