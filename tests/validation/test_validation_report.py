"""The report from a real lab run (tests/validation/data/validate-result.json, recorded with
`nictune validate` on `nictune lab` hosts) and the CLI's refusal of bad input (exit 2)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from nictune.cli import main
from nictune.plan import load_plan
from nictune.validation import calibrate, report, stats

# (an inventory's key_file must look like a private key; no connection reads this one)
# a real key (the inventory loads it) that no host trusts
FAKE_KEY = Ed25519PrivateKey.generate().private_bytes(
    Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()

DATA = Path(__file__).with_name("data")


@pytest.fixture()
def result() -> dict:
    doc = json.loads((DATA / "validate-result.json").read_text())
    doc["runs"] = [{**r, "raw": raw} for r, raw in zip(doc.pop("runs"), doc.pop("raw_runs"),
                                                        strict=True)]
    return doc


def test_the_plans_config_is_read_only_when_it_is_a_file_and_its_costs_say_so(
        result: dict, tmp_path: Path) -> None:
    """The re-prediction loaded `config:` unchecked after all the runs: /dev/zero read
    without end, and another config's costs were labelled as the plan's."""
    plan = load_plan(DATA / "validate-plan.yaml")
    one = ["t-rx2"]
    assert calibrate.repredict(replace(plan, config="/dev/zero"), {**result, "transmissions":
                                                                   one}, engine="fast")[
        "t-rx2"]["costs"] == "default costs"
    config = {"hosts": {"rx2": {"cores": 2, "costs": {"irq": "3us"}}},
              "nics": {"n": {"host": "rx2", "link": "10Gbit/s"}},
              "transmissions": [{"id": "t", "nic": "n", "size": "1MB", "packet_size": 512,
                                 "rate": "8kpps"}]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    again = calibrate.repredict(replace(plan, config=str(path)),
                                {**result, "transmissions": one}, engine="fast")
    assert again["t-rx2"]["costs"] == f"costs of {path} (changed since the plan was made)"
    config["hosts"] = {"other": config["hosts"]["rx2"]}
    config["nics"]["n"]["host"] = "other"
    path.write_text(yaml.safe_dump(config))
    again = calibrate.repredict(replace(plan, config=str(path)),
                                {**result, "transmissions": one}, engine="fast")
    assert again["t-rx2"]["costs"] == f"default costs (rx2 is not in {path})"


def test_report_files_tables_and_verdicts(result: dict, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    plan = load_plan(DATA / "validate-plan.yaml")
    again = calibrate.repredict(plan, result, engine="fast")  # no config here: default costs
    assert again["t-rx2"]["costs"] == "default costs"
    assert again["t-rx2"]["optimized"]["wakeups"] > 10 * again["t-rx2"]["default"]["wakeups"]
    doc = report.build(result, plan, again)
    paths = report.write(doc, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["nictune_validation"] == 1
    before = {kind: p.read_text() for kind, p in paths.items()}
    with monkeypatch.context() as m:  # a report whose plots fail leaves the old files
        m.setattr(report, "plots", lambda doc: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            report.write({**doc, "wall_s": 1.0}, tmp_path / "out")
    assert {kind: p.read_text() for kind, p in paths.items()} == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "report.html", "report.json", "report.md"]
    rows = report.table1(doc)
    assert [r[0] for r in rows[1:]] == ["t-rx1", "t-rx2"]
    # packets left in the ring and the loss are in the table (a watermark arm's stranded
    # packets were under the loss threshold and shown nowhere), the agent's notes by arm
    at = rows[0].index("stranded d/o")
    assert rows[0][at + 1] == "loss % d/o" and rows[1][at].count(" / ") == 1
    notes = [n for t in doc["transmissions"] for n in t["agent_notes"]]
    assert notes and all(n.split(": ")[0] in ("default", "optimized") for n in notes)
    t2 = doc["transmissions"][1]
    assert t2["summary"]["default"]["wakeups"]["n"] == result["repeats"]
    # the same traffic: the watermark default wakes far less often than active_wait
    assert t2["summary"]["default"]["wakeups"]["mean"] * 10 < \
        t2["summary"]["optimized"]["wakeups"]["mean"]
    assert t2["comparisons"]["wakeups"]["verdict"] == "regression"  # more wake-ups: worse
    verdict = t2["comparisons"]["throughput_bps"]
    assert verdict["verdict"] in ("improvement", "regression", "no significant difference")
    md = paths["md"].read_text()
    assert "not significant" in md and "limited by sender" in md
    assert "coalesce unsupported" in md  # knobs the veth could not take are listed
    assert "model at the measured arrival rate" in md
    assert t2["predicted"]["optimized"]["throughput_bps"] > 0
    assert t2["predicted"]["optimized"]["wakeups_per_packet"] == pytest.approx(1.0, rel=0.05)
    assert "| plan Mbit/s (whole transmission) | at the run's size |" in md
    page = paths["html"].read_text()
    assert page.count("data:image/png;base64,") == 3 and "<table>" in page
    assert "src=\"http" not in page  # self-contained


def test_prediction_error_is_against_the_model_at_the_runs_size(result: dict) -> None:
    """The lab runs sent a tenth of each transmission (--scale 0.1): t-rx2's default waits
    out its 500 ms watermark timeout in every run, which the plan spread over ten times as
    many packets. Against the plan the error read +151 %."""
    plan = load_plan(DATA / "validate-plan.yaml")
    again = calibrate.repredict(plan, result, engine="fast")
    block = report.build(result, plan, again)["transmissions"][1]["predicted"]["default"]
    measured = block["measured_throughput_bps"]
    assert block["error_basis"] == "repredicted"
    assert block["run_throughput_bps"] == again["t-rx2"]["default"]["throughput_bps"]
    assert block["throughput_error"] == pytest.approx(
        (block["run_throughput_bps"] - measured) / measured)
    assert block["plan_throughput_error"] == pytest.approx(
        (block["throughput_bps"] - measured) / measured)
    assert block["plan_throughput_error"] > 1.4 and -0.5 < block["throughput_error"] < -0.4
    alone = report.build(result, plan)["transmissions"][1]["predicted"]["default"]
    assert alone["error_basis"] == "plan" and alone["run_throughput_bps"] is None
    assert alone["throughput_error"] == block["plan_throughput_error"]


def test_wakeups_per_packet_count_the_packets_the_model_simulated(result: dict) -> None:
    """A lossy run: the model re-runs the packets received, so its wake-ups are per packet
    received, like the measured ones (t-rx2 optimized is active_wait: one per packet)."""
    for r in result["runs"]:
        r["packets_sent"] *= 2
    plan = load_plan(DATA / "validate-plan.yaml")
    doc = report.build(result, plan, calibrate.repredict(plan, result, engine="fast"))
    block = doc["transmissions"][1]["predicted"]["optimized"]
    assert block["run_wakeups_per_packet"] == pytest.approx(1.0)
    assert block["wakeups_error"] == pytest.approx(
        1.0 / block["measured_wakeups_per_packet"] - 1)
    row = next(x for x in report.markdown(doc).splitlines() if x.startswith("| t-rx2 | opt"))
    assert row.split(" | ")[7] == "1.0000"


def test_one_run_per_arm_has_no_interval_and_strict_json(result: dict, tmp_path: Path) -> None:
    result["runs"] = [r for r in result["runs"] if r["repeat"] == 0]
    result["repeats"] = 1
    doc = report.build(result, load_plan(DATA / "validate-plan.yaml"))
    paths = report.write(doc, tmp_path / "out")

    def refuse(token: str) -> None:
        raise ValueError(f"{token} in report.json")

    saved = json.loads(paths["json"].read_text(), parse_constant=refuse)
    thr = saved["transmissions"][0]["summary"]["default"]["throughput_bps"]
    assert thr["n"] == 1 and thr["mean"] > 0 and thr["half_width"] is None
    row = report.table1(doc)[1]
    assert row[2].endswith(" ± n/a") and "[n/a] (p=n/a, not significant)" in row[4]


def test_relative_change_ci_covers_the_true_ratio() -> None:
    """The CI of (optimized - default) / default must count the default mean's own
    uncertainty (delta method): dividing the difference's CI by the measured default mean
    as if it were exact covers a doubled mean in only ≈ 88 % of 3-run experiments."""
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        lo, hi = stats.compare("x", rng.normal(10, 3, 3), rng.normal(20, 3, 3)).change_ci
        hits += lo <= 1.0 <= hi
    assert 0.93 <= hits / 2000 <= 0.97


def _inventory(tmp_path: Path) -> Path:
    (tmp_path / "id_ed25519").write_text(FAKE_KEY)
    inv = tmp_path / "inventory.yaml"
    inv.write_text("hosts:\n  sender: {address: 10.0.0.1}\n"
                   "  rx1: {address: 10.0.0.2, nics: {rx1-veth0: veth0}}\n"
                   "  rx2: {address: 10.0.0.3, nics: {rx2-veth0: veth0}}\n")
    return inv


@pytest.mark.parametrize("change, expected", [
    (lambda p, i: ["/nonexistent/plan.yaml", "--inventory", i], "cannot read"),
    (lambda p, i: [p, "--inventory", "/nonexistent/inv.yaml"], "cannot read"),
    (lambda p, i: [p, "--inventory", i, "--sender", "nobody"], "--sender"),
    # (the traffic never crossed a NIC: 242 s of runs, exit 0, a report of n/a)
    (lambda p, i: [p, "--inventory", i, "--sender", "rx2"], "is a receiver of the plan"),
    (lambda p, i: [p, "--inventory", i, "--transmissions", "t-x"], "no transmission"),
    (lambda p, i: [p, "--inventory", i, "--repeats", "0"], "--repeats"),
    (lambda p, i: [p, "--inventory", i, "--scale", "2"], "--scale"),
    (lambda p, i: [p, "--inventory", i, "--scale", "0.5", "--duration", "1"], "not allowed"),
])
def test_bad_input_exits_2_before_any_connection(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 change, expected: str) -> None:
    plan = tmp_path / "plan.yaml"
    shutil.copy(DATA / "validate-plan.yaml", plan)
    argv = change(str(plan), str(_inventory(tmp_path)))
    if "--sender" not in argv:
        argv += ["--sender", "sender"]
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["validate", *argv, "--out", str(tmp_path / "o")]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("key", ["default_setting", "packet_size"])
def test_a_plan_without_the_default_or_packet_size_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture, key: str) -> None:
    """Without them the default arm was the plan's own setting (the plan measured against
    itself) and the packets 1500 B; a deploy still takes such a hand-made plan."""
    doc = yaml.safe_load((DATA / "validate-plan.yaml").read_text())
    del doc["transmissions"][1][key]
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(doc))
    code = main(["validate", str(plan), "--inventory", str(_inventory(tmp_path)),
                 "--sender", "sender", "--out", str(tmp_path / "o")])
    assert code == 2
    assert f"transmissions[1].{key}: is required" in capsys.readouterr().err
    assert load_plan(plan).entries[1].id == doc["transmissions"][1]["id"]


def test_inventory_missing_the_plans_nic_exits_2(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    inv = _inventory(tmp_path)
    inv.write_text(inv.read_text().replace("rx2-veth0", "other"))
    code = main(["validate", str(DATA / "validate-plan.yaml"), "--inventory", str(inv),
                 "--sender", "sender"])
    assert code == 2 and "rx2-veth0" in capsys.readouterr().err


def test_calibrate_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    inv = str(_inventory(tmp_path))
    assert main(["calibrate", "--inventory", inv, "--sender", "sender", "--receiver",
                 "nobody"]) == 2
    assert main(["calibrate", "--inventory", inv, "--sender", "sender", "--receiver", "rx1",
                 "--modes", "turbo"]) == 2
    err = capsys.readouterr().err
    assert "nobody" in err and "turbo" in err
    assert main(["calibrate", "--inventory", inv, "--sender", "rx1", "--receiver", "rx1"]) == 2
    assert "--sender and --receiver are both 'rx1'" in capsys.readouterr().err


@pytest.mark.parametrize("sweep, expected", [
    (["--sizes", "1400", "1400"], "--sizes: calibration needs >= 2 different packet sizes"),
    (["--rates", "5000"], "--rates: calibration needs >= 2 rates"),
    (["--rates", "2", "5"], "--rates"),  # both send the minimum of 10 packets
    (["--modes", "active_wait", "busy_poll"], "--modes: calibration needs >= 2 of"),
    (["--modes", "busy_poll"], "--modes"),
])
def test_calibrate_refuses_a_sweep_that_cannot_fit_before_any_connection(
        tmp_path: Path, capsys: pytest.CaptureFixture, sweep: list[str], expected: str) -> None:
    """The inventory's addresses are not reachable: a sweep let through would fail with
    exit 1 at the connection instead."""
    code = main(["calibrate", "--inventory", str(_inventory(tmp_path)), "--sender", "sender",
                 "--receiver", "rx1", "--out", str(tmp_path / "p.yaml"), *sweep])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.yaml").exists()


def test_plots_keep_intervals_above_zero_and_small_counts_visible(result: dict) -> None:
    """Two runs gave a throughput interval reaching -85 Mbit/s and 5 wake-ups beside 770
    were invisible on a linear axis; the plots now stop the interval at 0, show each run
    and go logarithmic when values are 30x apart."""
    two_runs = {"n": 2, "mean": 25.0, "half_width": 86.0}
    assert report.whiskers(two_runs) == (25.0, 86.0)
    assert report.whiskers({"n": 5, "mean": 34.1e6, "half_width": 0.6e6}, 1e6) == \
        pytest.approx((0.6, 0.6))
    assert report.whiskers({"n": 0, "mean": None, "half_width": None}) == (0.0, 0.0)
    assert report.spread([5.0, 6.0, 770.0]) and not report.spread([25.0, 36.0, 0.0])
    images = report.plots(report.build(result))
    assert sorted(images) == ["interrupts", "predicted_vs_measured", "throughput"]


def test_findings_say_deploy_notes_once_and_when_the_throughputs_disagree(result: dict) -> None:
    """A veth's five deployer notes were listed for each arm; t-rx2's two throughputs
    moved in opposite directions (+86 % / -39 %) without a word."""
    md = report.markdown(report.build(result))
    t1 = md.split("**t-rx1**")[1].split("**t-rx2**")[0]
    assert t1.count("pfring unavailable") == 1 and "  - both arms: pfring unavailable" in t1
    t2 = md.split("**t-rx2**")[1]
    assert "the two throughputs move apart: over the receive span +86.1 %" in t2
    assert "(default 5,094, optimized 3,086 packets/s)" in t2
    assert "move apart" not in t1  # t-rx1's two throughputs agree in sign


def test_findings_say_when_the_model_misses_one_arm(result: dict) -> None:
    """The lab's t-rx1 (twenty-third session): the model at the measured rate matched the
    plan's arm and put the default 16.6 % under its measurement, so a plan predicted
    faster measured 2-3 % slower; the findings now say which arm the model misses."""
    plan = load_plan(DATA / "validate-plan.yaml")
    again = calibrate.repredict(plan, result, engine="fast")
    measured = {t["transmission"]: [t["summary"][arm]["throughput_bps"]["mean"]
                                    for arm in report.ARMS]
                for t in report.build(result)["transmissions"]}
    (d, o), t2 = measured["t-rx1"], measured["t-rx2"]
    again["t-rx1"]["default"]["throughput_bps"] = 0.834 * d
    again["t-rx1"]["optimized"]["throughput_bps"] = o
    for arm, m in zip(report.ARMS, t2, strict=True):  # both arms 2 % off: nothing to say
        again["t-rx2"][arm]["throughput_bps"] = 1.02 * m
    md = report.markdown(report.build(result, plan, again))
    one, two = md.split("**t-rx1**")[1].split("**t-rx2**")
    line = next(x for x in one.splitlines() if "off the default arm" in x)
    assert "is -16.6 % off the default arm and +0.0 % off the optimized one" in line
    assert f"predicts between them ({100 * (o / (0.834 * d) - 1):+.1f} %)" in line
    assert f"not the one measured ({100 * (o / d - 1):+.1f} %)" in line
    # t-rx1's default is a watermark read through AF_PACKET: the cause is named for it
    assert "(default: a watermark read through AF_PACKET" in line
    assert "optimized: a watermark" not in line  # (the plan's arm is not missed)
    assert "off the default arm" not in two


def test_the_reason_follows_the_receivers_block_timer(result: dict) -> None:
    """A kernel whose TPACKET_V3 block timer runs freely (Linux 6.18): without the
    timer's start the model follows it on average, and the finding says a few runs can
    lie off that mean instead of blaming PF_RING's timeout; with it, that the timer does
    not explain the miss."""
    plan = load_plan(DATA / "validate-plan.yaml")
    for r in result["runs"]:
        r["ring"] = {"ring": "tpacket_v3", "block_timer": "free-running"}
    again = calibrate.repredict(plan, result, engine="fast")
    assert again["t-rx1"]["engine"] == "fast; des for a free-running block timer"
    d = next(t for t in report.build(result)["transmissions"]
             if t["transmission"] == "t-rx1")["summary"]["default"]["throughput_bps"]["mean"]
    again["t-rx1"]["default"]["throughput_bps"] = 0.834 * d
    doc = report.build(result, plan, again)
    assert next(t for t in doc["transmissions"] if t["transmission"] == "t-rx1")[
        "block_timer"]["default"] == "free-running, start unknown"
    line = next(x for x in report.markdown(doc).splitlines() if "off the default arm" in x)
    assert "a few runs' waits can lie well off that" in line
    assert "PF_RING's timeout" not in line
    for r in result["runs"]:
        r["ring"]["block_timer_start"] = 1.0
    line = next(x for x in report.markdown(report.build(result, plan, again)).splitlines()
                if "off the default arm" in x)
    assert "the block timer does not explain this" in line
