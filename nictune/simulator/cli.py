"""`nictune simulate`: simulate transmissions of a config under their default setting or
under a setting given on the command line (DESIGN §4). See docs/simulate.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from nictune.argtypes import count
from nictune.errors import InputError
from nictune.model import (
    MODES,
    Config,
    NicSetting,
    Transmission,
    load_config,
    parse_setting,
)
from nictune.simulator import ENGINES, simulate
from nictune.simulator.metrics import Metrics, core_load
from nictune.units import format_bitrate, format_duration

PROGRESS_EVERY_S = 10.0  # seconds between progress lines when stderr is not a terminal

DESCRIPTION = ("Simulate the receive path of each transmission under its default setting, or "
               "under the setting options given (they override each selected transmission's "
               "default). Prints a table, or the contract keys (docs/simulate.md) with --json.")
# command-line option -> setting key (values keep their units: parse_setting reads them)
OPTIONS = {"mode": "mode", "poll_interval": "poll_interval", "watermark": "watermark",
           "watermark_timeout": "watermark_timeout", "ring_slots": "ring_slots"}
_USED = {"passive_wait": ("poll_interval",), "watermark": ("watermark", "watermark_timeout")}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate", help="simulate transmissions under their default or a given setting",
        description=DESCRIPTION)
    p.add_argument("config", metavar="CONFIG", help="YAML config (see configs/README.md)")
    p.add_argument("--transmission", metavar="ID", action="append", default=[],
                   help="simulate only this transmission (repeatable; default: all)")
    p.add_argument("--engine", choices=ENGINES, default="des",
                   help="des: SimPy reference (default); fast: the vectorised model")
    p.add_argument("--mode", choices=MODES, help="override the setting's mode")
    p.add_argument("--poll-interval", metavar="T", help="passive_wait timer, e.g. 50us")
    p.add_argument("--watermark", metavar="W", type=int, help="watermark in packets")
    p.add_argument("--watermark-timeout", metavar="T",
                   help="watermark timeout, e.g. 500ms; needed with --mode watermark unless "
                        "the default is a watermark setting (0: none, packets below the "
                        "watermark are stranded)")
    p.add_argument("--ring-slots", metavar="N", type=int, help="RX ring size in slots")
    p.add_argument("--exact", action="store_true",
                   help="simulate every packet (default: a 200000-packet window, scaled)")
    p.add_argument("--seed", metavar="S", type=count(0), default=0,
                   help="arrival seed (default 0)")
    p.add_argument("--json", action="store_true", help='print {"results": [...]} as JSON')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.exact and args.engine == "fast":  # (it was accepted and did nothing)
        raise InputError("--exact: the fast engine takes no window (it models the whole "
                         "transmission); --exact is for --engine des")
    config = load_config(args.config)
    for line in config.over_link():
        sys.stderr.write(f"note: {line}\n")
    selected = config.select(args.transmission)
    overrides = {key: getattr(args, opt) for opt, key in OPTIONS.items()
                 if getattr(args, opt) is not None}
    transmissions = beside(config, selected)
    nics = {t.nic for t in selected}  # a setting is a NIC's: the options set all of its
    settings = {t.id: setting_for(config, t, overrides if t.nic in nics else {})
                for t in transmissions}
    by_id = {m.transmission: m
             for m in run_by_host(config, transmissions, settings, args, sys.stderr)}
    results = [by_id[t.id] for t in selected]
    shared = sharing_a_core(config, transmissions, settings) if args.engine == "fast" else []
    shared = sorted({t.id for t in selected}.intersection(shared))
    if shared:
        sys.stderr.write(
            f"note: {len(shared)} of {len(selected)} transmissions share their IRQ core "
            "with others; there the fast engine's interrupt counts and latencies are "
            "approximations (docs/engines.md, Fidelity); --engine des is the reference\n")
    if args.json:
        json.dump({"results": [m.to_json() for m in results]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(results)
                         + shared_cores(config, transmissions, selected, by_id))
    return 0


def beside(config: Config, selected: Sequence[Transmission]) -> list[Transmission]:
    """Every transmission of the hosts of `selected`, in config order: a host's
    transmissions share its cores and memory bus, so they are simulated together even
    when only some are asked for."""
    hosts = {config.nic_of(t).host for t in selected}
    return [t for t in config.transmissions if config.nic_of(t).host in hosts]


def sharing_a_core(config: Config, transmissions: Sequence[Transmission],
                   settings: dict[str, NicSetting]) -> list[str]:
    """The ids of the transmissions whose IRQ core, on their host, takes others' too."""
    cores = config.by_core(transmissions, settings)
    return sorted(i for ids in cores.values() if len(ids) > 1 for i in ids)


def shared_cores(config: Config, transmissions: Sequence[Transmission],
                 selected: Sequence[Transmission], by_id: Mapping[str, Metrics]) -> str:
    """A line per IRQ core that serves one of `selected` and several of `transmissions`
    (a host's, simulated together): how many (and how many of them the table shows), and
    `core_load`."""
    shown = {t.id for t in selected}
    by_tid = {t.id: t for t in transmissions}
    lines = []
    cores = config.by_core(transmissions, {t.id: by_id[t.id].setting for t in transmissions})
    for (host, core), ids in cores.items():
        k = len(shown.intersection(ids))
        if len(ids) > 1 and k:
            load = core_load([by_id[i] for i in ids], [by_tid[i] for i in ids])
            lines.append(f"  {host} core {core}: {len(ids)} transmissions"
                         + (f" ({k} shown)" if k < len(ids) else "")
                         + f", {load.describe()}")
    if not lines:
        return ""
    return ("IRQ cores taking several transmissions (the most their CPU shares add up to "
            "at one moment, busy-polling ones apart: the model charges a core per NIC; "
            "the packets they drop):\n" + "\n".join(lines) + "\n")


def setting_for(config: Config, t: Transmission, overrides: dict[str, Any]) -> NicSetting:
    """`t`'s default setting with the command line's options applied, validated like a
    config's (`50us` accepted; a parameter the mode does not use is an error)."""
    base = config.default_setting(t)
    raw: dict[str, Any] = {"mode": base.mode, "ring_slots": base.ring_slots,
                           "irq_core": base.irq_core, "placement": base.placement}
    if overrides.get("mode", base.mode) == base.mode:
        params = {"poll_interval": base.poll_interval, "watermark": base.watermark,
                  "watermark_timeout": base.watermark_timeout}
        raw.update({k: v for k, v in params.items() if k in _USED.get(base.mode, ())})
    raw.update(overrides)
    where = f"options for {t.id}"
    try:
        return parse_setting(raw, config.nic_of(t), config.host_of(t), where, "")
    except InputError as exc:
        # (`--ring-slots 64` against a default watermark of 128 blamed a value not given)
        kept = next((k for k in raw if k not in overrides
                     and str(exc).startswith(f"{where}: {k}:")), None)
        if kept is None:
            raise
        raise InputError(f"{exc} (the default setting's {kept}, kept: give "
                         f"--{kept.replace('_', '-')} too)") from None


def run_by_host(config: Config, transmissions: Sequence[Transmission],
                settings: dict[str, NicSetting], args: argparse.Namespace,
                progress: TextIO, every: float = PROGRESS_EVERY_S) -> list[Metrics]:
    """Simulate host by host (a host's transmissions together), counting on a terminal;
    elsewhere (a log) a line at most every `every` seconds, none for a shorter run."""
    hosts: dict[str, list[str]] = {}
    for t in transmissions:
        hosts.setdefault(config.nic_of(t).host, []).append(t.id)
    tty = progress.isatty()
    done: dict[str, Metrics] = {}
    started = last = time.monotonic()
    for ids in hosts.values():
        if tty:
            progress.write(f"\rsimulating {len(done) + 1}-{len(done) + len(ids)}"
                           f"/{len(transmissions)} ({ids[0]})\x1b[K")
            progress.flush()
        for m in simulate(config, {i: settings[i] for i in ids}, engine=args.engine,
                          seed=args.seed, exact=args.exact):
            done[m.transmission] = m
        now = time.monotonic()
        if not tty and now - last >= every and len(done) < len(transmissions):
            progress.write(f"simulated {len(done)}/{len(transmissions)} transmissions in "
                           f"{now - started:.0f} s\n")
            progress.flush()
            last = now
    if tty:
        progress.write("\r\x1b[K")
    return [done[t.id] for t in transmissions]


def table(results: Sequence[Metrics]) -> str:
    """An aligned table, one row per transmission; `~` marks extrapolated rows."""
    head = ("id", "setting", "throughput", "delivered", "dropped", "stranded", "interrupts",
            "cpu", "latency p99")
    rows = [head]
    for m in results:
        rows.append((
            m.transmission + ("~" if m.extrapolated else ""), m.setting.describe(),
            format_bitrate(m.throughput_bps), str(m.packets_delivered), str(m.packets_dropped),
            str(m.packets_stranded), f"{m.interrupts:.0f}", f"{100 * m.cpu_util:.1f}%",
            format_duration(m.latency_p99_s)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
             for r in rows]
    out = "\n".join(lines) + "\n"
    windows = sorted({m.window_packets for m in results if m.extrapolated})
    if windows:
        first = (f"{windows[0]}" if len(windows) == 1 else
                 f"{windows[0]}–{windows[-1]} (--json: window_packets)")
        out += (f"~ simulated over the first {first} packets of the transmission and scaled "
                "to the whole of it (--exact simulates every packet)\n")
    return out


