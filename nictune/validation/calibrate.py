"""Calibration: fit the host cost profile from measured runs and check the model with it.

`calibrate` sweeps receive modes × packet rates × packet sizes between a sender and a
receiver (each mode applied through the deployer, one agent + hping3 run per point, each
point `seconds` long so packet counts differ between points and the per-packet cost can
be told apart from the per-run constant), then fits the consumer's CPU time per run as

    cpu_s ≈ irq · wake-ups + per_packet · packets + per_byte · bytes

by non-negative least squares (`scipy.optimize.nnls`, columns scaled) over the blocking
modes (busy_poll spins: its CPU is the whole duration in the model, not a sum of costs).
The four coefficients are told apart only by a sweep of >= 2 packet sizes (bytes vs
packets), >= 2 packet counts (packets vs the per-run constant) and >= 2 blocking modes
(their wake-ups per packet differ: irq vs per_packet); such a sweep is required before
anything runs, and a measured design that still cannot tell two columns apart is refused.
The CPU is the agent's own (getrusage: user + system, which includes the softirq work the
kernel charges to it while it runs) — what the consumer pays, not the whole host.

The result is a host profile YAML (`costs`, `fit`) that configs load with
`hosts.NAME.profile: FILE`. Every point is then simulated with the default costs and with
the fitted ones, at the rate the sender really achieved, and the predicted throughput
and wake-ups are compared with the measured ones (relative errors, before and after).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import nnls

from nictune.deploy import transaction as tx
from nictune.deploy.inventory import Inventory, InventoryError
from nictune.deploy.probe import capture_profile_path
from nictune.deploy.transport import Connection
from nictune.errors import InputError, RunError
from nictune.files import atomic_write
from nictune.model import MODES, Costs, NicSetting, load_config, parse_config
from nictune.plan import Plan
from nictune.simulator import des, simulate
from nictune.validation import remote, runner, traffic
from nictune.validation.report import json_safe

SWEEP_SETTINGS = {
    "active_wait": NicSetting("active_wait"),
    "passive_wait": NicSetting("passive_wait", poll_interval=0.001),
    "watermark": NicSetting("watermark", watermark=32, watermark_timeout=0.005),
    "busy_poll": NicSetting("busy_poll"),
}
BLOCKING = ("active_wait", "passive_wait", "watermark")
COLUMNS = ("wake-ups", "packets", "bytes", "the per-run constant")
MAX_CONDITION = 50.0  # of the column-scaled design; a good sweep is ≈ 6
MIN_R2 = 0.5
PORT = 19999
TIMER_PHASES = 8  # a free-running block timer's phases the model is averaged over


@dataclass
class Options:
    seconds: float = 1.0  # per point: packets = rate × seconds, so counts vary across points
    rates: Sequence[float] | None = None
    sizes: Sequence[int] | None = None
    modes: Sequence[str] | None = None
    repeats: int = 1
    nic: str | None = None
    engine: str = "des"
    settings: dict[str, NicSetting] = field(default_factory=lambda: dict(SWEEP_SETTINGS))

    def sweep(self) -> tuple[list[str], list[float], list[int]]:
        modes = list(self.modes or MODES)
        bad = [m for m in modes if m not in MODES]
        if bad:
            raise InputError(f"--modes: unknown mode {bad[0]!r} (modes: {', '.join(MODES)})")
        sizes = list(self.sizes or (200, 1400))
        if any(not 64 <= s <= 9000 for s in sizes):
            raise InputError(f"--sizes: packet sizes must be 64..9000 bytes, got {sizes}")
        rates = list(self.rates or (2000.0, 5000.0, 10000.0))
        _check_identifiable(modes, rates, sizes, self.seconds)
        return modes, rates, sizes


def _point_packets(rate: float, seconds: float) -> int:
    """Packets sent at one sweep point: `seconds` at `rate`, at least 10."""
    return max(10, round(rate * seconds))


def _check_identifiable(modes: list[str], rates: list[float], sizes: list[int],
                        seconds: float) -> None:
    """Refuse a sweep whose points cannot tell the fit's four coefficients apart."""
    if len(set(sizes)) < 2:
        raise InputError("--sizes: calibration needs >= 2 different packet sizes to tell the "
                         f"per-byte cost from the per-packet cost, got {sizes}")
    if len({_point_packets(r, seconds) for r in rates}) < 2:
        raise InputError("--rates: calibration needs >= 2 rates that send different packet "
                         "counts (rate × --seconds, at least 10) to tell the per-packet cost "
                         f"from the per-run constant, got {', '.join(f'{r:g}' for r in rates)}")
    if len(set(modes) & set(BLOCKING)) < 2:
        raise InputError(f"--modes: calibration needs >= 2 of {', '.join(BLOCKING)} (their "
                         "wake-ups per packet differ, which tells irq from per_packet), got "
                         f"{', '.join(modes)}")


def _point_config(costs: Costs, size: int, rate: float, packets: int, ring: int) -> Any:
    """A one-host, one-NIC config for simulating one sweep point."""
    return parse_config({
        "hosts": {"h": {"cores": 1, "costs": asdict(costs)}},
        "nics": {"n": {"host": "h", "link": "10Gbit/s", "ring_slots": ring,
                       "max_ring_slots": max(ring, 32768)}},
        "transmissions": [{"id": "p", "nic": "n", "size": packets * size,
                           "packet_size": size, "rate": rate, "arrival": "cbr"}],
    }, source="<calibration point>")


def realized(setting: NicSetting, ring: dict[str, Any]) -> NicSetting:
    """The setting as the agent realized it: AF_PACKET rounds W to whole-page blocks and
    a timeout to whole milliseconds (at least 1)."""
    per_block = ring.get("packets_per_block")
    if setting.mode == "watermark" and per_block and ring.get("ring") == "tpacket_v3":
        setting = replace(setting, watermark=min(per_block, setting.ring_slots // 2))
        if setting.watermark_timeout and ring.get("block_timeout_ms"):
            setting = replace(setting, watermark_timeout=ring["block_timeout_ms"] / 1000)
    return setting


def free_running(setting: NicSetting, ring: dict[str, Any]) -> bool:
    """Whether the realized watermark timeout is a free-running timer (TPACKET_V3's block
    timer from Linux 6.18: a partial block retires at its next tick, 0..timeout after its
    first packet, not the timeout after it as in PF_RING and the model)."""
    return (setting.mode == "watermark" and bool(setting.watermark_timeout)
            and ring.get("block_timer") == "free-running")


def _timer_phases(setting: NicSetting, ring: dict[str, Any], first: float | None
                  ) -> list[float]:
    """The phases (ticks at (phase + k)·timeout after the first arrival) to simulate a
    free-running block timer at: its own, if the run says when it started, else spread."""
    start = ring.get("block_timer_start")
    if start is None or first is None:
        return [(k + 0.5) / TIMER_PHASES for k in range(TIMER_PHASES)]
    return [((start - first) / setting.watermark_timeout) % 1.0]


def predict(costs: Costs, point: dict[str, Any], setting: NicSetting,
            engine: str = "des") -> dict[str, float]:
    """The model's throughput, wake-ups and CPU for a measured run (its packets received),
    at the rate the packets really arrived (the sender's pace as seen on the wire) with the
    realized setting; `packets` is the count simulated. A free-running block timer
    ticks every timeout from when the agent set its ring up: the DES with the ticks there
    against the first arrival, or where either time is missing the DES's mean over
    TIMER_PHASES phases (whatever `engine`: the fast engine has no free-running timer)."""
    rate = point.get("arrival_rate_pps") or point["sender_rate_pps"]
    cfg = _point_config(costs, point["packet_size"], rate, point["packets_received"],
                        setting.ring_slots)
    ring = point.get("ring") or {}
    real = {"p": realized(setting, ring)}
    if free_running(real["p"], ring):
        runs = [des.simulate(cfg, real, exact=True, timer_phase=phase)[0]
                for phase in _timer_phases(real["p"], ring, point.get("first_arrival"))]
    else:
        runs = simulate(cfg, real, engine=engine, exact=True)
    return {"throughput_bps": float(np.mean([m.throughput_bps for m in runs])),
            "wakeups": float(np.mean([m.interrupts for m in runs])),
            "cpu_s": float(np.mean([m.cpu_busy_s for m in runs])),
            "packets": float(runs[0].packets_offered)}


def repredict(plan: Plan, result: dict[str, Any], engine: str = "des",
              costs: Costs | None = None) -> dict[str, Any]:
    """The model at each validation run's measured rate with its realized setting, using
    `costs`, else the host's costs from the plan's config when it loads, else defaults."""
    hosts: dict[str, Costs] = {}
    source = "default costs"
    if costs is not None:
        source = "given costs"
    elif plan.config and Path(plan.config).is_file():  # (not /dev/zero or a FIFO)
        try:
            config = load_config(plan.config)
            hosts = {name: h.costs for name, h in config.hosts.items()}
            changed = plan.config_hash and config.digest != plan.config_hash
            source = f"costs of {plan.config}" + (
                " (changed since the plan was made)" if changed else "")
        except InputError:
            pass
    out: dict[str, Any] = {}
    for tid in result["transmissions"]:
        entry = plan.entry(tid)
        host_costs = costs or hosts.get(entry.host, Costs())
        block: dict[str, Any] = {"engine": engine, "costs": source}
        if costs is None and hosts and entry.host not in hosts:
            block["costs"] = f"default costs ({entry.host} is not in {plan.config})"
        for arm in ("default", "optimized"):
            setting = entry.setting if arm == "optimized" else entry.default_setting
            preds = [predict(host_costs, {**r, "packet_size": r["raw"]["spec"]["packet_size"]},
                             setting, engine)
                     for r in result["runs"] if r["transmission"] == tid and r["arm"] == arm
                     and r["packets_received"] > 1]
            if preds:
                block[arm] = {k: float(np.mean([p[k] for p in preds])) for k in preds[0]}
            if engine != "des" and any(free_running(setting, r.get("ring") or {})
                                       for r in result["runs"] if r["transmission"] == tid):
                block["engine"] = f"{engine}; des for a free-running block timer"
        out[tid] = block
    return out


def fit(points: list[dict[str, Any]]) -> dict[str, Any]:
    """NNLS fit of irq, per_packet, per_byte (+ a per-run constant: the agent's own start
    and stop, not a model cost) on the blocking-mode points. Refuses (RunError) points that
    cannot tell the coefficients apart and a fit that charges nothing to any cost; zero
    coefficients and an R² below MIN_R2 are listed in `warnings`."""
    rows = [p for p in points if p["mode"] != "busy_poll" and p["packets_received"]]
    if len(rows) < 4:
        raise RunError(f"calibration needs >= 4 blocking-mode points, got {len(rows)}")
    a = np.array([[p["wakeups"], p["packets_received"], p["bytes_received"], 1.0]
                  for p in rows], dtype=float)
    b = np.array([p["cpu_s"] for p in rows], dtype=float)
    scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
    condition = _check_design(a / scale)
    x, _ = nnls(a / scale, b)
    coef = x / scale
    pred = a @ coef
    rel = np.abs(pred - b) / np.where(b > 0, b, np.nan)
    ss_res = float(((pred - b) ** 2).sum())
    ss_tot = float(((b - b.mean()) ** 2).sum())
    out = {"irq": float(coef[0]), "per_packet": float(coef[1]), "per_byte": float(coef[2]),
           "per_run_s": float(coef[3]), "points": len(rows),
           "cpu_mean_rel_error": float(np.nanmean(rel)),
           "r2": 1 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
           "condition": condition}
    return {**out, "warnings": _fit_warnings(out)}


def _check_design(scaled: np.ndarray) -> float:
    """The condition number of the column-scaled design; RunError naming the columns the
    points cannot tell apart (the smallest singular vector's large entries) above
    MAX_CONDITION."""
    _, sv, vt = np.linalg.svd(scaled, full_matrices=False)
    condition = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    if condition > MAX_CONDITION:
        weights = np.abs(vt[-1])
        mixed = [c for c, w in zip(COLUMNS, weights, strict=True) if w >= 0.3 * weights.max()]
        what = (f"measure the cost of {mixed[0]}" if len(mixed) == 1 else
                f"tell the costs of {', '.join(mixed[:-1])} and {mixed[-1]} apart")
        raise RunError(f"calibration: the measured points cannot {what} (design condition "
                       f"number {condition:.3g} > {MAX_CONDITION:g}); sweep more different "
                       "sizes, rates or modes — no profile written")
    return condition


def _fit_warnings(coef: dict[str, Any]) -> list[str]:
    """Why the fitted costs may not be worth using; RunError when packets and bytes are
    both free (a config refuses that: the models need some work per packet — and such a
    profile would simulate no packet work at all)."""
    zero = [k for k in ("irq", "per_packet", "per_byte") if coef[k] == 0]
    if "per_packet" in zero and "per_byte" in zero:
        free = "wake-ups, packets or bytes" if "irq" in zero else "packets or bytes"
        raise RunError(f"calibration: the fit charges nothing to {free} (R² "
                       f"{coef['r2']:.3g}: the per-run constant or noise is all the CPU); "
                       "lengthen --seconds or raise --rates — no profile written")
    out = [f"{k} fitted as 0: the points show no cost for it above their noise, and the "
           "profile charges nothing for it" for k in zero]
    if not coef["r2"] >= MIN_R2:
        out.append(f"R² {coef['r2']:.3g} < {MIN_R2:g}: wake-ups, packets and bytes explain "
                   "little of the measured CPU (noise or the per-run constant dominate); "
                   "lengthen --seconds or add --repeats before using this profile")
    return out


def _errors(points: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    """Mean absolute relative error of the predictions in `key` per metric."""
    out: dict[str, float | None] = {}
    for metric in ("throughput_bps", "wakeups", "cpu_s"):
        errs = [abs(p[key][metric] - p[metric]) / p[metric] for p in points
                if p.get(metric) and p.get(key) and (metric != "cpu_s" or
                                                     p["mode"] != "busy_poll")]
        out[metric] = float(np.mean(errs)) if errs else None
    return out


def _point(rx: remote.Receiver, tx_conn: Connection, opts: Options, mode: str, size: int,
           rate: float, rep: int) -> dict[str, Any]:
    """One sweep point measured: `size`-byte packets at `rate` under `mode`'s setting."""
    spec = traffic.TrafficSpec("calibration", rx.address, PORT, size,
                               _point_packets(rate, opts.seconds), max(1, round(1e6 / rate)))
    raw = remote.measure(rx, tx_conn, spec, ["--profile", capture_profile_path(rx.host, rx.iface)],
                         f"cal-{mode}-{size}-{rate:g}-{rep}")
    return {**remote.derive(raw), "mode": mode, "packet_size": size, "rate_pps": rate,
            "setting": opts.settings[mode].to_json()}


def calibrate(inventory: Inventory, sender: str, receiver: str, opts: Options,
              progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run the sweep, fit the profile, compare predictions before and after."""
    modes, rates, sizes = opts.sweep()
    for name in (sender, receiver):
        if name not in inventory.hosts:
            raise InventoryError(f"{inventory.path}: unknown host {name!r} "
                                 f"(hosts: {', '.join(inventory.hosts)})")
    if sender == receiver:
        raise InputError(f"--sender and --receiver are both {sender!r}: calibration measures "
                         "traffic that crosses a NIC from another host")
    host = inventory.hosts[receiver]
    nic = opts.nic or next(iter(host.nics), None)
    if nic is None:
        raise InventoryError(f"{inventory.path}: host {receiver} has no nics")
    try:
        iface = host.iface(nic)
    except InventoryError as exc:  # (name the file, as every other inventory error does)
        raise InventoryError(f"{inventory.path}: {exc}") from None
    points: list[dict[str, Any]] = []
    with Connection(inventory.hosts[sender]).connect() as tx_conn, \
            Connection(host).connect() as rx_conn:
        had_snapshot = tx.load_snapshot(host.state_dir, host.name) is not None
        # (an armed timer now is another run's: calibration's put-back supersedes only
        # its own)
        if not had_snapshot and tx.Watchdog(rx_conn).arming() not in ("none", "fired"):
            raise RunError(f"{receiver}: another nictune run's on-host timer is armed; "
                           "calibrate when it has ended")
        if had_snapshot:
            raise RunError(f"{receiver}: nictune already manages this host (a snapshot "
                           "exists); run `nictune rollback` first so calibration can "
                           "restore it afterwards")
        with remote.Receiver.prepare(rx_conn, host, iface) as rx:
            try:
                for mode in modes:
                    applied = tx.apply_host(rx_conn, host, {nic: opts.settings[mode]})
                    if not applied.ok:
                        raise RunError(f"{receiver}: applying {mode} failed: {applied.error}")
                    for size, rate, rep in itertools.product(sizes, rates, range(opts.repeats)):
                        progress(f"{mode} {size} B at {rate:g} pps ({rep + 1})")
                        points.append(_point(rx, tx_conn, opts, mode, size, rate, rep))
            finally:
                try:
                    restored = tx.restore_host(rx_conn.reconnect_if_lost(), host, own=True)
                except KeyboardInterrupt:  # (Ctrl-C again: say what is left)
                    progress(runner.unrestored(
                        {receiver: "FAILED: interrupted while restoring it"}, inventory.path))
                    raise
                if not restored.ok:
                    raise RunError(f"{receiver}: restore failed; " + runner.unrestored(
                        {receiver: f"FAILED: {restored.error}"}, inventory.path))
    coef = fit(points)
    fitted = Costs(irq=coef["irq"], per_packet=coef["per_packet"],
                   per_byte=coef["per_byte"])
    for p in points:
        if p["sender_rate_pps"] and p["packets_sent"]:
            setting = opts.settings[p["mode"]]
            p["predicted_before"] = predict(Costs(), p, setting, opts.engine)
            p["predicted_after"] = predict(fitted, p, setting, opts.engine)
    return {"sender": sender, "receiver": receiver, "nic": nic, "iface": iface,
            "fit": coef, "costs": asdict(fitted), "engine": opts.engine,
            "error_before": _errors(points, "predicted_before"),
            "error_after": _errors(points, "predicted_after"), "points": points}


def _duration(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    for unit, factor in (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3)):
        if seconds < 1000 * factor:
            return f"{seconds / factor:.6g}{unit}"
    return f"{seconds:.6g}s"


def write_profile(result: dict[str, Any], path: Path) -> None:
    """A host profile YAML (`costs`, `fit`) that configs load with `profile: FILE`."""
    costs = {k: _duration(v) for k, v in result["costs"].items()}
    doc = json_safe({"costs": costs, "fit": {
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "method": "nnls: agent cpu_s ~ irq*wakeups + per_packet*packets + per_byte*bytes",
        "sender": result["sender"], "receiver": result["receiver"], "nic": result["nic"],
        "points": result["fit"]["points"], "r2": result["fit"]["r2"],
        "cpu_mean_rel_error": result["fit"]["cpu_mean_rel_error"],
        "condition": result["fit"]["condition"], "warnings": result["fit"]["warnings"],
        "error_before": result["error_before"], "error_after": result["error_after"]}})
    atomic_write(path, "# nictune calibrate: host cost profile (use as hosts.NAME.profile)\n"
                 + yaml.safe_dump(doc, sort_keys=False))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def summary(result: dict[str, Any]) -> str:
    f, c = result["fit"], result["costs"]
    lines = [f"calibrated {result['receiver']}/{result['iface']} from {len(result['points'])} "
             f"points ({f['points']} in the fit)",
             f"  irq {_duration(c['irq'])}  per_packet {_duration(c['per_packet'])}  "
             f"per_byte {_duration(c['per_byte'])}",
             f"  fit: R² {f['r2']:.3f}, mean |error| of CPU time {_pct(f['cpu_mean_rel_error'])}",
             "  model vs measured (mean |relative error|):"
             f" throughput {_pct(result['error_before']['throughput_bps'])} -> "
             f"{_pct(result['error_after']['throughput_bps'])}, wake-ups "
             f"{_pct(result['error_before']['wakeups'])} -> "
             f"{_pct(result['error_after']['wakeups'])}, CPU "
             f"{_pct(result['error_before']['cpu_s'])} -> {_pct(result['error_after']['cpu_s'])}"
             " (default costs -> fitted)"]
    lines += [f"  warning: {w}" for w in f["warnings"]]
    return "\n".join(lines)
