"""The benchmark scripts run end to end on tiny inputs (their figures are recorded in
benchmarks/RESULTS.md; this only keeps the scripts themselves from breaking)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_fidelity_prints_every_metric_and_the_pairs(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # (its worker pool imports it)
    fidelity = importlib.import_module("fidelity")
    png = tmp_path / "plots" / "fidelity.png"
    out = fidelity.main(["--cases", "4", "--seeds", "0", "--packets", "600", "--pairs", "2",
                         "--bursts", "2", "--defaults", "2", "--workers", "1",
                         "--condition", "1", "--plot", str(png)])
    printed = capsys.readouterr().out
    assert f"plot: {png}" in printed and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for metric in ("throughput", "interrupts", "cpu", "drops", "latency"):
        assert f"worst {metric}:" in printed
        assert metric in out["summary"]
    assert out["pairs"] is not None and out["bursts"] is not None and out["cases"] == 4
    assert "burst_watermark_cases" in printed and "watermarks above a burst:" in printed
    assert out["defaults"] is not None and out["defaults_noise"] is not None
    assert "ends on the timeout: fast and DES disagree on" in printed
    assert set(out["default_flips"]) == {"fast", "des"}
    assert "the DES against itself on cores 1 % slower (same seed):" in printed
    assert "the fast engine against the range of the DES over cores 1 % slower" in printed
    assert set(out["condition"]) == {"slower", "faster", "moved", "either_way_p95",
                                     "against_range",
                                     "pairs_against_range", "bursts_against_range",
                                     "defaults_against_range"}


def test_fidelity_plot_draws_rows_with_nothing_to_scale(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A panel with no row above zero (busy_poll's interrupts), or no rows at all, is drawn
    with a note: a log axis of nothing raised after the whole run, before --json."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fidelity = importlib.import_module("fidelity")
    zero = {"throughput_bps": 0.0, "interrupts": 0.0}
    row = {"kind": "shared", "grid": 0, "des": zero, "fast": zero,
           "errors": {"throughput": 0.0, "interrupts": 0.0}}
    for rows in ([], [row]):
        png = tmp_path / f"{len(rows)}.png"
        fidelity.plot(rows, png)
        assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", ["rows.txt", "rows"])
def test_fidelity_plot_must_be_a_png(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str], name: str) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fidelity = importlib.import_module("fidelity")
    with pytest.raises(SystemExit) as stop:
        fidelity.main(["--plot", str(tmp_path / name)])
    assert stop.value.code == 2 and "expected a .png file" in capsys.readouterr().err


def test_fidelity_plans_reports_the_guard_per_host(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    plans = importlib.import_module("fidelity_plans")
    out = plans.main(["--pairs", "2", "--shared", "2", "--packets", "2000", "--population",
                      "8", "--generations", "2", "--workers", "1"])
    printed = capsys.readouterr().out
    assert "first choice rejected by the DES" in printed
    assert {"one-NIC pairs", "shared hosts", "all"} <= set(out["summary"])
    # a shipped plan is never one the DES puts more than 1 % below the default's throughput
    assert min(r["plan_throughput"] for r in out["rows"]) >= 0.99


def test_fidelity_rack_lists_every_interrupt_row_it_counts_as_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing under the table names each transmission counted above 5 %, with its
    core and how many share it; the fast engine's count is made 50 % high for one
    transmission so that exactly it is listed."""
    from dataclasses import replace

    from nictune.model import NicSetting, parse_config

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    rack = importlib.import_module("fidelity_rack")
    config = parse_config({
        "hosts": {"h": {"cores": 2}},
        "nics": {f"n{i}": {"host": "h", "link": "10Gbit/s"} for i in range(3)},
        "transmissions": [{"id": f"t{i}", "nic": f"n{i}", "size": 4_000_000,
                           "packet_size": 1000, "rate": "50kpps", "arrival": "cbr"}
                          for i in range(3)]}, "test.yaml")
    settings = {t.id: NicSetting("passive_wait", poll_interval=50e-6, irq_core=int(i > 1))
                for i, t in enumerate(config.transmissions)}
    simulate = rack.simulate

    def one_fast_count_high(config: Any, settings: Any, engine: str) -> list[Any]:
        out = simulate(config, settings, engine=engine)
        return [replace(m, interrupts=1.5 * m.interrupts)
                if engine == "fast" and m.transmission == "t1" else m for m in out]

    monkeypatch.setattr(rack, "simulate", one_fast_count_high)
    e = rack.errors(config, settings)
    assert len(e["interrupts"]) == 3
    assert [round(x, 2) for x in e["interrupts"]][1] >= 0.45
    assert len(e["interrupts_off"]) == 1
    assert e["interrupts_off"][0].startswith("t1 (passive_wait")
    assert "core 0 beside 1): DES" in e["interrupts_off"][0]
    assert "(1 of 3 > 5 %)" in rack.row("settings", e)


def test_bench_fast_times_each_passive_model_and_restores_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = importlib.import_module("bench_fast")
    from nictune.simulator import fast_passive
    before = {name: getattr(fast_passive, name) for name in bench.MODELS}
    out = bench.models(20)
    assert out["elements"] == 20 * 24 and out["models"]["_passive_map"][0] > 0
    assert all(sec >= 0 for _, sec in out["models"].values())
    assert {name: getattr(fast_passive, name) for name in bench.MODELS} == before


def test_bench_fast_rows_include_rack_with_nothing_shared(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = importlib.import_module("bench_fast")
    rack = bench.CONFIGS["rack.yaml"]()
    alone = bench.CONFIGS["rack.yaml, each alone"]()
    # every transmission on a host and NIC of its own, with its own host's costs
    assert len(alone.hosts) == len(alone.nics) == len(rack.transmissions)
    for t in alone.transmissions:
        original = rack.nics[rack.transmission(t.id).nic]
        assert alone.nics[t.nic].host == t.id
        assert alone.hosts[t.id].costs == rack.hosts[original.host].costs
    for name in bench.CONFIGS:
        row = bench.measure(name, 2, repeat=1)
        assert row["population"] == 2 and row["evals_per_s"] > 0


def test_fidelity_counts_misses_within_the_des_s_own_noise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fidelity = importlib.import_module("fidelity")

    def row(fast: float, des: float) -> dict:
        return {"fast": {"interrupts": fast}, "des": {"interrupts": des},
                "errors": {"interrupts": abs(fast - des) / max(des, 1.0)}}

    rows = [row(110, 100), row(130, 100), row(100, 100)]  # 10 % and 30 % off, one exact
    noise = [row(88, 100), row(88, 100), row(50, 100)]  # the DES moves 12 between seeds
    assert fidelity._within_noise(rows, noise) == 1  # (the exact row is no miss)


def test_fidelity_measures_the_fast_engine_against_the_des_s_range(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fidelity = importlib.import_module("fidelity")
    keys = ("throughput_bps", "interrupts", "cpu_busy_s", "packets_dropped",
            "latency_mean_s")

    def row(fast: float, des: float) -> dict:
        return {"fast": {**dict.fromkeys(keys, fast), "packets_offered": 1000},
                "des": {**dict.fromkeys(keys, des), "packets_offered": 1000},
                "errors": {"interrupts": abs(fast - des) / max(des, 1.0)}}

    rows = [row(110, 100), row(130, 100), row(100, 100), row(0.5, 0)]  # 10 %, 30 %, exact
    slower = [row(112, 100), row(101, 100), row(100, 100), row(0, 0)]  # ("fast": that core)
    faster = [row(97, 100), row(99, 100), row(140, 100), row(0, 0)]
    # the first row's DES moves 12 % with the core; the second's 1 %; the third is no miss
    assert fidelity._moved(rows, [slower, faster]) == 1
    assert list(fidelity._either_way([slower, faster])) == pytest.approx([0.12, 0.01, 0.4, 0])
    ranged = fidelity.against_range(rows, [slower, faster])
    assert [r["errors"]["interrupts"] for r in ranged] == pytest.approx([0.0, 0.29, 0.0, 0.5])
    assert ranged[1]["errors"]["drops"] == pytest.approx(29 / 1000)
    # a DES value of 0: interrupts and throughput relative to at least 1, CPU to 1e-9 s
    assert ranged[3]["errors"]["cpu"] == pytest.approx(0.5 / 1e-9)
    with pytest.raises(ValueError):  # (rows and runs must pair one to one)
        fidelity.against_range(rows, [slower[:3], faster])
    with pytest.raises(SystemExit):
        fidelity.main(["--condition", "100"])


def test_fidelity_reuses_the_des_rows_of_an_earlier_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fidelity = importlib.import_module("fidelity")
    grid = ["--cases", "6", "--seeds", "3", "--packets", "600", "--workers", "1"]
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    out = fidelity.main([*grid, "--pairs", "0", "--bursts", "0", "--defaults", "0",
                         "--json", str(first)])
    reused = fidelity.main([*grid, "--reuse-des", str(first), "--json", str(again)])
    assert "the fast engine only: the DES's rows from" in capsys.readouterr().out
    assert reused["summary"] == out["summary"] and reused["rows"] == out["rows"]
    assert again.read_text() == first.read_text()  # every row, both engines, the same
    # the fast engine does run: a saved row's fast side is recomputed, not copied
    rows = json.loads(first.read_text())
    true_count = rows[0]["fast"]["interrupts"]
    rows[0]["fast"]["interrupts"] = -1.0
    first.write_text(json.dumps(rows))
    fidelity.main([*grid, "--reuse-des", str(first), "--json", str(again)])
    assert json.loads(again.read_text())[0]["fast"]["interrupts"] == true_count
    # rows of another case, or none for a case, a row without a DES metric, or options
    # that rerun the DES: refused
    rows = json.loads(again.read_text())
    del rows[1]["des"]["interrupts"]
    (tmp_path / "partial.json").write_text(json.dumps(rows))
    rows[0]["digest"] = "0" * 16
    first.write_text(json.dumps(rows))
    for argv in ([*grid, "--reuse-des", str(first)],
                 [*grid, "--reuse-des", str(tmp_path / "partial.json")],
                 [*grid[:2], "--seeds", "4", "--reuse-des", str(again)],
                 [*grid, "--reuse-des", str(again), "--noise"],
                 [*grid, "--reuse-des", str(tmp_path / "missing.json")]):
        with pytest.raises(SystemExit) as exit_:
            fidelity.main(argv)
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{rows[0]['case']}/{rows[0]['transmission']}: a row of another case" in err
    assert "no row among the saved rows" in err and "need the DES" in err
    assert "a saved row without the DES's 'interrupts'" in err


def test_fidelity_archetypes_counts_misses_per_neighbour_and_reuses_its_des(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    archetypes = importlib.import_module("fidelity_archetypes")
    argv = ["--cases", "8", "--packets", "600", "--workers", "1"]
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    out = archetypes.main([*argv, "--json", str(first)])
    printed = capsys.readouterr().out
    for kind in ("busy_poll", "active_wait", "passive_wait", "watermark"):
        assert f"| beside {kind} | 2 |" in printed
    assert out["cases"] == 8 and sum(out["per_neighbour"].values()) == out["misses"]
    assert "the neighbour's effect on the consumers' wake-ups" in printed
    moved = out["effect"]["all"]
    assert moved["same"] <= moved["n"] <= 8
    assert moved["n"] == sum(out["effect"][k]["n"] for k in out["per_neighbour"])
    assert out["des_effect"]["all"]["n"] == moved["n"]  # (the same consumers)
    rows = json.loads(first.read_text())
    assert len(rows["alone"]) == len(rows["alone_noise"]) == 8
    assert {r["kind"] for r in rows["alone"]} == {"single"}
    assert {r["fast"]["engine"] for r in rows["alone_noise"]} == {"des"}
    assert out["misses"] == sum(r["transmission"] == "t0" and r["errors"]["interrupts"] > 0.05
                                for r in rows["fast"])
    # the DES's rows reused: the same report, the fast side recomputed
    true_count = rows["fast"][0]["fast"]["interrupts"]
    rows["fast"][0]["fast"]["interrupts"] = -1.0
    first.write_text(json.dumps(rows))
    reused = archetypes.main([*argv, "--reuse-des", str(first), "--json", str(again)])
    assert "the DES runs from" in capsys.readouterr().out
    assert {k: v for k, v in reused.items() if k != "wall_s"} == {
        k: v for k, v in out.items() if k != "wall_s"}
    assert json.loads(again.read_text())["fast"][0]["fast"]["interrupts"] == true_count
    # rows of other cases, a missing second run or consumer alone, a bad file or --cases:
    # exit 2
    del rows["noise"][3]
    (tmp_path / "partial.json").write_text(json.dumps(rows))
    rows = json.loads(again.read_text())
    del rows["alone"][5]
    (tmp_path / "no_alone.json").write_text(json.dumps(rows))
    rows = json.loads(again.read_text())
    rows["alone_noise"][2]["digest"] = "0" * 16
    (tmp_path / "other_alone.json").write_text(json.dumps(rows))
    for bad in ([*argv[:2], "--seed", "1", *argv[2:], "--reuse-des", str(again)],
                [*argv, "--reuse-des", str(tmp_path / "partial.json")],
                [*argv, "--reuse-des", str(tmp_path / "no_alone.json")],
                [*argv, "--reuse-des", str(tmp_path / "other_alone.json")],
                [*argv, "--reuse-des", str(tmp_path / "missing.json")],
                ["--cases", "0"]):
        with pytest.raises(SystemExit) as exit_:
            archetypes.main(bad)
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "a row of another case" in err and "without the DES's second run" in err
    assert "-alone/t0: no row among the saved rows" in err


@pytest.mark.parametrize("script, argv, message", [
    ("fidelity", ["--workers", "0"], "--workers: must be at least 1, got 0"),
    ("fidelity", ["--cases", "0"], "--cases: must be at least 1, got 0"),
    ("fidelity", ["--pairs", "-1"], "--pairs: must be at least 0, got -1"),
    ("fidelity", ["--json", "/etc/passwd/rows.json"], "/etc/passwd is not a directory"),
    ("fidelity_archetypes", ["--packets", "5"], "--packets: must be at least 10, got 5"),
    ("fidelity_archetypes", ["--json", "/etc/passwd/rows.json"],
     "/etc/passwd is not a directory"),
    ("fidelity_plans", ["--population", "2"], "--population: must be at least 4, got 2"),
    ("fidelity_plans", ["--workers", "x"], "expected a whole number, got 'x'"),
])
def test_fidelity_scripts_refuse_bad_options_before_running(
        script: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad option is one line and exit code 2 at once, not a traceback minutes later
    (a --json path that cannot be written used to fail after the whole run)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(script).main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_run_all_names_the_benchmarks_that_measured_nothing(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """`make bench` as a user without root or hping3: the skipped benchmarks exit 0, and
    the last line says they measured nothing (a failure still exits 1)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    run_all = importlib.import_module("run_all")
    scripts = {"bench_a.py": "print('bench_a: skipped: no root')",
               "bench_b.py": "print('1.5 M/s')",
               "bench_c.py": "print('skipped: hping3 is not installed')"}
    for name, body in scripts.items():
        (tmp_path / name).write_text(body + "\n")
    monkeypatch.setattr(run_all, "benchmarks", lambda: sorted(tmp_path.glob("bench_*.py")))
    monkeypatch.setattr("sys.argv", ["run_all.py"])
    assert run_all.main() == 0
    out, err = capsys.readouterr()
    assert "1.5 M/s" in out and "=== bench_b.py: exit 0" in out
    assert err.strip() == ("skipped, nothing measured: bench_a.py (no root); "
                           "bench_c.py (hping3 is not installed)")
    (tmp_path / "bench_b.py").write_text("raise SystemExit(3)\n")
    assert run_all.main() == 1
    assert "failed: bench_b.py" in capsys.readouterr().err


def test_the_scale_benchmarks_data_centre_is_a_valid_shared_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_optimize's generated data centre loads, and every host has several NICs (so
    the reports' per-host work, which was quadratic, is what it times)."""
    from nictune.model import load_config

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench_optimize = importlib.import_module("bench_optimize")
    path = tmp_path / "dc.yaml"
    path.write_text(bench_optimize.datacentre(3))
    config = load_config(path)
    assert len(config.transmissions) == 24 and len(config.nics) == 12
    assert config.several_nics == frozenset({"h0", "h1", "h2"})
