"""The validation report: report.json, report.md and a self-contained report.html.

Per transmission, like the seed paper's Table 1 (throughput with the default and the
optimized setting, improvement) plus wake-ups, interrupts, CPU, drops, 95 % confidence
intervals, Welch's test, which side limited the runs, the knobs that could not be applied
and the model's prediction beside the measurement.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from nictune.files import atomic_write
from nictune.plan import Plan
from nictune.validation import stats

ARMS = ("default", "optimized")
SPLIT = 0.05  # the model missing one arm by this much more than the other: said (findings)
# (metric, higher is better, label)
METRICS = (
    ("throughput_bps", True, "throughput (receive span)"),
    ("paper_throughput_bps", True, "throughput (sent / sender time, seed paper)"),
    ("wakeups", False, "wake-ups"),
    ("nic_interrupts", False, "NIC interrupts"),
    ("net_rx_softirqs", False, "NET_RX softirqs (host-wide)"),
    ("cpu_s", False, "agent CPU s"),
    ("context_switches", False, "agent context switches"),
    ("drops", False, "drops"),
    ("stranded", False, "packets left in the ring"),
    ("loss", False, "loss"),
    ("sender_rate_pps", True, "sender rate (pps)"),
    ("packets_sent", True, "packets sent"),
)
COMPARED = ("throughput_bps", "paper_throughput_bps", "wakeups", "nic_interrupts", "cpu_s")


def _values(runs: list[dict[str, Any]], metric: str) -> list[float]:
    return [float(r[metric]) for r in runs if r.get(metric) is not None]


def _predicted(plan: Plan | None, tid: str, arm: str) -> dict[str, Any] | None:
    if plan is None:
        return None
    entry = next((e for e in plan.entries if e.id == tid), None)
    pred = entry.predicted.get(arm) if entry else None
    return pred if isinstance(pred, dict) else None


def _rel_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or not measured:
        return None
    return (predicted - measured) / measured


def _prediction_block(pred: dict[str, Any] | None, again: dict[str, Any] | None,
                      runs: list[dict[str, Any]],
                      measured: dict[str, stats.Summary]) -> dict[str, Any] | None:
    """The plan's numbers for this arm (the whole transmission at the plan's rate) next to
    the measured means (per packet received for counts). The errors are against `again`,
    the model re-run at the runs' own size and measured rate, when there is one: a run of
    `--scale`/`--duration` is a fraction of the transmission, and fixed tails (a watermark
    timeout) weigh differently in it."""
    if not pred:
        return None
    offered = pred.get("packets_offered") or 0
    per_packet = {k: (pred.get(k) or 0) / offered if offered else None
                  for k in ("interrupts", "cpu_busy_s")}
    received = stats.summarize(_values(runs, "packets_received")).mean
    m_wake = measured["wakeups"].mean / received if received else None
    m_cpu = measured["cpu_s"].mean / received if received else None
    thr = pred.get("throughput_bps")
    m_thr = measured["throughput_bps"].mean
    run_thr = again["throughput_bps"] if again else None
    run_wake = again["wakeups"] / again["packets"] if again else None
    return {
        "throughput_bps": thr, "measured_throughput_bps": m_thr,
        "run_throughput_bps": run_thr,
        "throughput_error": _rel_error(run_thr if again else thr, m_thr),
        "plan_throughput_error": _rel_error(thr, m_thr),
        "error_basis": "repredicted" if again else "plan",
        "wakeups_per_packet": per_packet["interrupts"], "measured_wakeups_per_packet": m_wake,
        "run_wakeups_per_packet": run_wake,
        "wakeups_error": _rel_error(run_wake if again else per_packet["interrupts"], m_wake),
        "plan_wakeups_error": _rel_error(per_packet["interrupts"], m_wake),
        "cpu_per_packet_s": per_packet["cpu_busy_s"], "measured_cpu_per_packet_s": m_cpu,
        "offered_bps": pred.get("offered_bps"),
    }


def build(result: dict[str, Any], plan: Plan | None = None,
          repredicted: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report document from `runner.validate`'s result."""
    rows = []
    for tid in result["transmissions"]:
        runs = {arm: [r for r in result["runs"] if r["transmission"] == tid and r["arm"] == arm]
                for arm in ARMS}
        summaries = {arm: {m: stats.summarize(_values(runs[arm], m)) for m, _, _ in METRICS}
                     for arm in ARMS}
        comparisons = {}
        for m, higher, _ in METRICS:
            if m in COMPARED and _values(runs["default"], m) and _values(runs["optimized"], m):
                comparisons[m] = stats.compare(m, _values(runs["default"], m),
                                               _values(runs["optimized"], m), higher).to_json()
        entry = plan.entry(tid) if plan is not None else None
        again = (repredicted or {}).get(tid) or {}
        first = (runs["default"] or runs["optimized"])[0]
        rows.append({
            "transmission": tid,
            "host": entry.host if entry else None, "nic": entry.nic if entry else None,
            "packet_size": first["raw"]["spec"]["packet_size"],
            "packets_per_run": first["raw"]["spec"]["count"],
            "target_rate_pps": first["target_rate_pps"],
            "settings": {arm: runs[arm][0]["setting"] for arm in ARMS if runs[arm]},
            "summary": {arm: {m: s.to_json() for m, s in summaries[arm].items()}
                        for arm in ARMS},
            "comparisons": comparisons,
            "limited_by": {arm: dict(Counter(x for r in runs[arm] for x in r["limited_by"]))
                           for arm in ARMS},
            "backend": first["backend"],
            "block_timer": {arm: _block_timer(runs[arm]) for arm in ARMS if runs[arm]},
            # (said per arm: "watermark 1 rounded to 6" is one arm's, whose wake-ups are
            # then not the plan's)
            "agent_notes": sorted({f"{arm}: {n}" for arm in ARMS for r in runs[arm]
                                   for n in r["notes"]}),
            "not_applied": {arm: result.get("deploy_notes", {}).get(f"{tid}/{arm}", [])
                            for arm in ARMS},
            "predicted": {arm: _prediction_block(_predicted(plan, tid, arm), again.get(arm),
                                                 runs[arm], summaries[arm]) for arm in ARMS},
            "repredicted": again or None,
        })
    return json_safe({
        "nictune_validation": 1, "plan": result["plan"], "inventory": result["inventory"],
        "sender": result["sender"], "repeats": result["repeats"],
        "scale": result["scale"], "duration": result["duration"],
        "wall_s": result["wall_s"], "restored": result.get("restored", {}),
        "transmissions": rows,
        "runs": [{k: v for k, v in r.items() if k != "raw"} for r in result["runs"]],
        "raw_runs": [r["raw"] for r in result["runs"]]})


def json_safe(x: Any) -> Any:
    """`x` with every non-finite float as None (an undefined CI, the t of two constant
    arms): JSON has no NaN or Infinity."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


# ----------------------------------------------------------------------------- text


def _fmt(x: float | None, scale: float = 1.0, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x / scale:,.{digits}f}"


def _ci(s: dict[str, Any], scale: float = 1.0, digits: int = 2) -> str:
    if not s["n"]:
        return "n/a"
    return f"{_fmt(s['mean'], scale, digits)} ± {_fmt(s['half_width'], scale, digits)}"


def _verdict(c: dict[str, Any] | None) -> str:
    if not c:
        return "n/a"
    lo, hi = c["change_ci"]
    change = "n/a" if c["change"] is None else f"{100 * c['change']:+.1f} %"
    ci = "n/a" if lo is None else f"{100 * lo:+.1f}, {100 * hi:+.1f}"
    p = "n/a" if c["p_value"] is None else f"{c['p_value']:.3g}"
    label = c["verdict"] if c["significant"] else "not significant"
    return f"{change} [{ci}] (p={p}, {label})"


def table1(report: dict[str, Any]) -> list[list[str]]:
    """Rows of the Table-1-like summary (header first)."""
    out = [["transmission", "packet size (B)", "default Mbit/s", "optimized Mbit/s",
            "change (95 % CI, Welch)", "seed-paper Mbit/s default → optimized",
            "wake-ups default → optimized", "NIC IRQs default → optimized",
            "CPU s default → optimized", "drops d/o", "stranded d/o", "loss % d/o",
            "limited by",
            "plan-predicted Mbit/s d/o (whole transmission)"]]
    for t in report["transmissions"]:
        d, o = t["summary"]["default"], t["summary"]["optimized"]
        pd, po = t["predicted"]["default"], t["predicted"]["optimized"]
        limits = sorted({k for arm in ARMS for k in t["limited_by"][arm]})
        out.append([
            t["transmission"], str(t["packet_size"]),
            _ci(d["throughput_bps"], 1e6, 3), _ci(o["throughput_bps"], 1e6, 3),
            _verdict(t["comparisons"].get("throughput_bps")),
            f"{_fmt(d['paper_throughput_bps']['mean'], 1e6, 3)} → "
            f"{_fmt(o['paper_throughput_bps']['mean'], 1e6, 3)}",
            f"{_ci(d['wakeups'], 1, 0)} → {_ci(o['wakeups'], 1, 0)}",
            f"{_fmt(d['nic_interrupts']['mean'], 1, 0)} → "
            f"{_fmt(o['nic_interrupts']['mean'], 1, 0)}",
            f"{_ci(d['cpu_s'], 1, 3)} → {_ci(o['cpu_s'], 1, 3)}",
            f"{_fmt(d['drops']['mean'], 1, 0)} / {_fmt(o['drops']['mean'], 1, 0)}",
            f"{_fmt(d['stranded']['mean'], 1, 0)} / {_fmt(o['stranded']['mean'], 1, 0)}",
            f"{_fmt(d['loss']['mean'], 0.01, 2)} / {_fmt(o['loss']['mean'], 0.01, 2)}",
            ", ".join(limits),
            f"{_fmt(pd and pd['throughput_bps'], 1e6, 3)} / "
            f"{_fmt(po and po['throughput_bps'], 1e6, 3)}",
        ])
    return out


def _findings(report: dict[str, Any]) -> list[str]:
    lines = []
    for t in report["transmissions"]:
        c = t["comparisons"]
        lines.append(f"**{t['transmission']}**: throughput {_verdict(c.get('throughput_bps'))}; "
                     f"wake-ups {_verdict(c.get('wakeups'))}; CPU {_verdict(c.get('cpu_s'))}.")
        for arm in ARMS:
            lim = t["limited_by"][arm]
            runs = len(_runs_of(report, t, arm))
            parts = [f"{k} in {v}/{runs} runs" for k, v in sorted(lim.items())]
            lines.append(f"  - {arm}: limited by {', '.join(parts)}.")
        span, paper = c.get("throughput_bps"), c.get("paper_throughput_bps")
        if span and paper and span["change"] is not None and paper["change"] is not None \
                and span["change"] * paper["change"] < 0:
            pace = [t["summary"][arm]["sender_rate_pps"]["mean"] for arm in ARMS]
            lines.append(f"  - the two throughputs move apart: over the receive span "
                         f"{100 * span['change']:+.1f} %, as the seed paper counts it (bytes "
                         f"sent over the sender's time) {100 * paper['change']:+.1f} %; the "
                         f"latter follows the sender's pace only (default "
                         f"{_fmt(pace[0], 1, 0)}, optimized {_fmt(pace[1], 1, 0)} packets/s)")
        rp = t.get("repredicted")
        if rp:
            parts = []
            for arm in ARMS:
                if rp.get(arm):
                    m = t["summary"][arm]
                    parts.append(f"{arm} {_fmt(rp[arm]['throughput_bps'], 1e6, 3)} Mbit/s "
                                 f"(measured {_fmt(m['throughput_bps']['mean'], 1e6, 3)}), "
                                 f"{_fmt(rp[arm]['wakeups'], 1, 0)} wake-ups (measured "
                                 f"{_fmt(m['wakeups']['mean'], 1, 0)})")
            lines.append(f"  - model at the measured arrival rate ({rp['engine']}, "
                         f"{rp['costs']}): " + "; ".join(parts))
            lines += _one_arm_missed(t)
        lines += _deploy_notes(t)
        for n in t["agent_notes"]:
            lines.append(f"  - agent: {n}")
    return lines


def _one_arm_missed(t: dict[str, Any]) -> list[str]:
    """A line when the model at the measured rate (`predicted.ARM.throughput_error`, the
    re-run's) misses one arm's throughput by more than `SPLIT` beyond the other's: the
    change it predicts between the arms is then not the one the runs can show."""
    blocks = [t["predicted"][arm] for arm in ARMS]
    if not all(b and b["error_basis"] == "repredicted" and b["throughput_error"] is not None
               and b["run_throughput_bps"] for b in blocks):
        return []
    err = [b["throughput_error"] for b in blocks]
    if abs(err[0] - err[1]) <= SPLIT:
        return []
    pred, meas = ([b[key] for b in blocks]
                  for key in ("run_throughput_bps", "measured_throughput_bps"))
    why = [f" ({arm}: {_block_timer_reason(t.get('block_timer', {}).get(arm))}; "
           "docs/validate.md)"
           for arm, e in zip(ARMS, err, strict=True)
           if abs(e) > SPLIT and t["backend"] == "af_packet"
           and t["settings"][arm]["mode"] == "watermark"]
    return [f"  - the model at the measured rate is {100 * err[0]:+.1f} % off the default "
            f"arm and {100 * err[1]:+.1f} % off the optimized one, so the change it "
            f"predicts between them ({100 * (pred[1] / pred[0] - 1):+.1f} %) is not the "
            f"one measured ({100 * (meas[1] / meas[0] - 1):+.1f} %): the arm it misses "
            f"decides the comparison{''.join(why)}"]


def _block_timer(runs: list[dict[str, Any]]) -> str | None:
    """How the receiver's kernel ran an arm's TPACKET_V3 block timer (the agent's
    `block_timer`), "free-running, start unknown" where a run did not say when it began."""
    ring = runs[0].get("ring") or {}
    timer = ring.get("block_timer")
    if timer == "free-running" and not all((r.get("ring") or {}).get("block_timer_start")
                                           for r in runs):
        return "free-running, start unknown"
    return timer


def _block_timer_reason(timer: str | None) -> str:
    """Why a watermark read through AF_PACKET can miss its model, by how the receiver's
    kernel ran the block timer (`_block_timer`)."""
    if timer == "free-running":
        return ("a watermark read through AF_PACKET; the model already places the "
                "free-running block timer's ticks where the agent started it, so the "
                "block timer does not explain this")
    if timer == "free-running, start unknown":
        return ("a watermark read through AF_PACKET, whose last partial block retires at "
                "the free-running block timer's next tick, anywhere from 0 to the timeout "
                "after the last packet: without the timer's start the model takes the "
                "mean over its phase, and a few runs' waits can lie well off that")
    return ("a watermark read through AF_PACKET, whose last partial block retires on the "
            "kernel's block timer, not on PF_RING's timeout after its first packet that "
            "the model follows")


def _deploy_notes(t: dict[str, Any]) -> list[str]:
    """The knobs the deployer could not set as asked, each once: a note of both arms is
    said for both (a veth's five notes were repeated per arm)."""
    seen: dict[str, dict[str, None]] = {}
    for arm in ARMS:
        for n in t["not_applied"][arm]:
            fb = f" (fallback: {n['fallback']})" if n.get("fallback") else ""
            seen.setdefault(f"{n['backend']} {n['kind']}: {n['detail']}{fb}", {})[arm] = None
    return [f"  - {'both arms' if len(arms) == len(ARMS) else next(iter(arms))}: {text}"
            for text, arms in seen.items()]


def markdown(report: dict[str, Any]) -> str:
    rows = table1(report)
    md = ["# nictune validation report", "",
          f"Plan `{report['plan']}`, sender `{report['sender']}`, {report['repeats']} repeats "
          f"per arm, interleaved default/optimized; "
          + (f"scale {report['scale']}" if report["scale"] else
             f"{report['duration']} s per run" if report["duration"] else "full size")
          + f"; wall time {report['wall_s']:.0f} s.", "",
          "Throughput is bytes received over the receive span (first arrival to last "
          "delivery) and, as the seed paper defines it, bytes sent over the sender's "
          "duration. Mean ± half-width of the 95 % confidence interval; the change is "
          "Welch's t-test of optimized against default — 'not significant' means the runs "
          "cannot tell the arms apart. NET_RX softirqs and /proc/stat are host-wide; NIC IRQs "
          "count the lines the probe finds for the interface, n/a where it has none (a "
          "veth).", "",
          "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    md += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    md += ["", "## Findings", "", *_findings(report), ""]
    md += ["## Predicted beside measured", "",
           "Plan: the optimizer's prediction for the whole transmission at the plan's "
           "offered rate — with --scale or --duration a run is only part of it, and fixed "
           "tails (a watermark timeout, the last partial batch) weigh differently, so it is "
           "shown, not compared. At the run's size: the model re-run at each run's packet "
           "count and measured arrival rate with the setting as realized (mean over the "
           "runs); the error, (predicted − measured) / measured, is against it. Wake-ups "
           "are per packet received, as the model re-ran the packets each run received.", "",
           "| transmission | arm | plan Mbit/s (whole transmission) | at the run's size | "
           "measured Mbit/s | error | plan wake-ups/pkt | at the run's size | measured |",
           "|---|---|---|---|---|---|---|---|---|"]
    for t in report["transmissions"]:
        for arm in ARMS:
            p = t["predicted"][arm] or {}
            m = t["summary"][arm]
            err = p.get("throughput_error")
            md.append(f"| {t['transmission']} | {arm} | {_fmt(p.get('throughput_bps'), 1e6, 3)} | "
                      f"{_fmt(p.get('run_throughput_bps'), 1e6, 3)} | "
                      f"{_fmt(m['throughput_bps']['mean'], 1e6, 3)} | "
                      f"{'n/a' if err is None else f'{100 * err:+.1f} %'} | "
                      f"{_fmt(p.get('wakeups_per_packet'), 1, 4)} | "
                      f"{_fmt(p.get('run_wakeups_per_packet'), 1, 4)} | "
                      f"{_fmt(p.get('measured_wakeups_per_packet'), 1, 4)} |")
    return "\n".join(md) + "\n"


# ----------------------------------------------------------------------------- plots


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def plots(report: dict[str, Any]) -> dict[str, str]:
    """Base64 PNGs: throughput, wake-ups/interrupts, predicted vs measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = report["transmissions"]
    xs = range(len(ts))
    out = {}
    for key, metric, scale, ylabel in (
            ("throughput", "throughput_bps", 1e6, "Mbit/s (receive span)"),
            ("interrupts", "wakeups", 1, "wake-ups per run")):
        fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(ts) + 2), 3.2))
        everything = []
        for k, arm in enumerate(ARMS):
            s = [t["summary"][arm][metric] for t in ts]
            means = [(x["mean"] or 0) / scale for x in s]
            errs = list(zip(*(whiskers(x, scale) for x in s), strict=True))
            at = [i + (k - 0.5) * 0.38 for i in xs]
            ax.bar(at, means, 0.38, yerr=errs, capsize=3, label=f"{arm} (mean, 95 % CI)")
            for x, t in zip(at, ts, strict=True):  # each run, so a few runs show as few
                vals = [v / scale for v in _values(_runs_of(report, t, arm), metric)]
                everything += vals
                ax.plot([x] * len(vals), vals, "k.", ms=4,
                        label="runs" if k == 0 and x == at[0] else None)
        if metric == "wakeups":
            irq = [[t["summary"][arm]["nic_interrupts"]["mean"] for t in ts] for arm in ARMS]
            for k, vals in enumerate(irq):
                pts = [(i + (k - 0.5) * 0.38, v) for i, v in zip(xs, vals, strict=True)
                       if v is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), "kx", label=f"NIC IRQs {ARMS[k]}")
            if spread(everything):
                ax.set_yscale("log")
                ylabel += " (log scale)"
        ax.set_xticks(list(xs), [f"{t['transmission']}\n(n = " + " / ".join(
            str(t["summary"][arm][metric]["n"]) for arm in ARMS) + ")" for t in ts])
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        out[key] = _png(fig)
        plt.close(fig)
    out["predicted_vs_measured"] = _predicted_vs_measured(plt, ts)
    return out


def whiskers(summary: dict[str, Any], scale: float = 1.0) -> tuple[float, float]:
    """How far a bar's 95 % interval reaches below and above its mean; below stops at 0:
    with two runs a t interval can reach far under it, which no count or rate can."""
    mean, half = (summary["mean"] or 0.0) / scale, (summary["half_width"] or 0.0) / scale
    return min(half, max(mean, 0.0)), half


def spread(values: list[float]) -> bool:
    """Whether values are too far apart for a linear axis (5 beside 770: the 5 vanish)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) > 30 * min(positive)


def _runs_of(report: dict[str, Any], t: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    return [r for r in report["runs"] if r["transmission"] == t["transmission"]
            and r["arm"] == arm]


def _predicted_vs_measured(plt: Any, ts: list[dict[str, Any]]) -> str:
    """Measured against the model at each run's size (filled) and the plan's prediction
    for the whole transmission (hollow), per arm."""
    fig, ax = plt.subplots(figsize=(4, 4))
    hi = 0.0
    for k, (arm, marker) in enumerate(zip(ARMS, "os", strict=True)):
        for key, label, face in (("run_throughput_bps", "model at the run's size", f"C{k}"),
                                 ("throughput_bps", "plan, whole transmission", "none")):
            pts = [(b[key] / 1e6, b["measured_throughput_bps"] / 1e6, t["transmission"])
                   for t in ts
                   if (b := t["predicted"][arm]) and b[key] and b["measured_throughput_bps"]]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                           facecolors=face, edgecolors=f"C{k}", label=f"{arm}: {label}")
                for x, y, name in pts:  # which transmission each point is
                    ax.annotate(name, (x, y), fontsize=6, xytext=(3, 3),
                                textcoords="offset points")
                hi = max(hi, *(max(p[:2]) for p in pts))
    if hi:
        ax.plot([0, 1.1 * hi], [0, 1.1 * hi], "k--", lw=0.8, label="predicted = measured")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    else:  # (a report without a plan or predictions)
        ax.text(0.5, 0.5, "no predictions to compare", ha="center", transform=ax.transAxes)
    ax.set_xlabel("predicted Mbit/s")
    ax.set_ylabel("measured Mbit/s")
    png = _png(fig)
    plt.close(fig)
    return png


def html_page(report: dict[str, Any], images: dict[str, str]) -> str:
    md_rows = table1(report)
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in md_rows[0])
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                   for r in md_rows[1:])
    findings = "".join(f"<li>{esc(x.strip().lstrip('- ').replace('**', ''))}</li>"
                       for x in _findings(report))
    imgs = "".join(f'<figure><img alt="{esc(k)}" src="data:image/png;base64,{v}">'
                   f"<figcaption>{esc(k.replace('_', ' '))}</figcaption></figure>"
                   for k, v in images.items())
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>nictune validation"
            "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
            "collapse}td,th{border:1px solid #999;padding:3px 6px;font-size:13px}"
            "figure{display:inline-block;margin:1em}</style></head><body>"
            f"<h1>nictune validation report</h1><p>Plan {esc(report['plan'])}, sender "
            f"{esc(report['sender'])}, {report['repeats']} repeats per arm (interleaved). "
            "Mean ± 95 % CI; change by Welch's t-test.</p>"
            f"<table><tr>{head}</tr>{body}</table><h2>Findings</h2><ul>{findings}</ul>"
            f"<h2>Plots</h2>{imgs}</body></html>\n")


def write(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write report.json, report.md, report.html (plots embedded) into `out`: all three
    are rendered first, then each is written whole, so a failure leaves the old ones."""
    texts = {"json": json.dumps(report, indent=1, default=float) + "\n",
             "md": markdown(report), "html": html_page(report, plots(report))}
    paths = {kind: out / f"report.{kind}" for kind in texts}
    for kind, text in texts.items():
        atomic_write(paths[kind], text)
    return paths
