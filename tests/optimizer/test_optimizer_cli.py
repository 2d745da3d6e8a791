"""`nictune optimize` end to end: files, plan loads, JSON, bad options, Dask, Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nictune.cli import main
from nictune.optimizer.cli import _Progress, available_memory, default_workers
from nictune.plan import load_plan

FAST = ["--population", "8", "--generations", "3"]


def test_optimizer_cli_writes_every_output_and_a_loadable_plan(
        small_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["optimize", str(small_config), "--out", str(out), *FAST, "--json"]) == 0
    printed = capsys.readouterr()
    doc, err = json.loads(printed.out), printed.err
    for name in ("plan.yaml", "pareto.csv", "logbook.csv", "convergence.png", "pareto.png",
                 "summary.md", "checkpoint.json"):
        assert (out / name).stat().st_size > 0, name
    plan = load_plan(out / "plan.yaml")
    assert [e.id for e in plan.entries] == ["a", "b", "c", "d"]
    assert plan.meta["engine"] == "fast" and plan.meta["verify"] == "des"
    assert set(plan.meta["versions"]) == {"nictune", "deap", "numpy", "simpy"}
    assert plan.meta["evaluations"] == 8 * 4 == doc["evaluations"]
    assert plan.entry("c").setting == plan.nic_settings()[("shared", "s1")]
    assert plan.entry("a").predicted["optimized"]["engine"] == "des"
    assert plan.entry("a").predicted["fast_optimized"]["engine"] == "fast"
    assert doc["plan"] == str(out / "plan.yaml") and doc["wall_s"] > 0
    first = doc["transmissions"][0]
    assert set(first) >= {"id", "setting", "default", "optimized"}
    assert first["default"]["throughput_bps"] > 0 and "latency_p99_s" in first["optimized"]
    summary = (out / "summary.md").read_text()
    assert "PREDICTED" in summary
    # the search's own figures for its pick, which the plots show, are told apart from
    # the table's: they were three different headline numbers for one plan
    with (out / "pareto.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["kind"] == "plan:throughput")
    # a shared host's settings carry their IRQ core and placement there, as in the summary
    assert re.search(r"s1: .* core=\d \w+; s2: .* core=\d \w+", row["settings"])
    assert re.search(r"na: [^;]*ring=\d+;", row["settings"])  # (alone on its host: none)
    gain = 100 * (float(row["throughput_ratio"]) - 1)
    assert f"before any DES check (the progress line, plots and pareto.csv show these): " \
           f"throughput {gain:+.3f} %" in summary
    assert "geometric means over the transmissions" in summary
    assert "checking the plan with the DES: the defaults and the plan of 3 hosts on" in err
    assert "checked in " in err


def test_optimizer_cli_prints_the_table_without_json(
        small_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", str(small_config), "--out", str(tmp_path / "r"), *FAST,
                 "--verify", "none", "--prefer", "balanced", "--energy"]) == 0
    text = capsys.readouterr()
    assert "| transmission | size | packet size | default throughput" in text.out
    assert "PREDICTED" in text.out and "gen    3/3" in text.err
    assert "checking the plan" not in text.err  # (--verify none)
    meta = load_plan(tmp_path / "r" / "plan.yaml").meta
    assert meta["prefer"] == "balanced" and meta["verify"] == "none"
    assert meta["objectives"] == ["throughput", "interrupts", "cpu", "energy"]
    header = (tmp_path / "r" / "pareto.csv").read_text().splitlines()[0]
    assert header == "kind,throughput_ratio,interrupts_ratio,cpu_ratio,energy_ratio,settings"


@pytest.mark.parametrize(("extra", "message"), [
    (["--population", "0"], "--population: must be at least 4, got 0"),
    # (NumPy's "Maximum allowed dimension exceeded", and the process pool's OverflowError)
    (["--population", "1" + "0" * 20], "--population: must be at most 10000, got 1000"),
    # (a million was accepted and asked for 116 GiB in the archive's pairwise comparison)
    (["--population", "1000000"], "--population: must be at most 10000, got 1000000"),
    (["--workers", "1" + "0" * 20], "--workers: must be at most 1024, got 1000"),
    (["--prefer", "x"], "invalid choice: 'x'"),
    (["--engine", "gpu"], "invalid choice: 'gpu'"),
    (["--generations", "two"], "expected a whole number, got 'two'"),
    # (a ValueError traceback from distributed, exit 1)
    (["--dask", "foo"], "got 'foo': not HOST:PORT with a port from 1 to 65535"),
    (["--dask", "localhost:8786x"], "got 'localhost:8786x': not HOST:PORT"),
    (["--dask", "http://127.0.0.1:8786"], "unknown address scheme 'http'"),
    (["--popluation", "8"], "nictune optimize: error: unrecognized arguments: --popluation 8 "
                            "(see nictune optimize --help)"),
])
def test_optimizer_cli_bad_options_exit_2(small_config: Path, extra: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["optimize", str(small_config), *extra])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_optimizer_cli_bad_inputs_exit_2(small_config: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["optimize", str(small_config), "--resume", str(empty)]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    out = tmp_path / "r"
    assert main(["optimize", str(small_config), "--out", str(out), *FAST, "--verify",
                 "none"]) == 0
    capsys.readouterr()
    assert main(["optimize", str(small_config), "--resume", str(out), "--seed", "5"]) == 2
    assert ": seed 5 differs from the checkpoint (0)" in capsys.readouterr().err
    seeded = tmp_path / "seeded"
    assert main(["optimize", str(small_config), "--out", str(seeded), *FAST, "--seed", "5",
                 "--verify", "none"]) == 0
    capsys.readouterr()
    assert main(["optimize", str(small_config), "--resume", str(seeded), "--seed", "0"]) == 2
    assert ": seed 0 differs from the checkpoint (5)" in capsys.readouterr().err
    (out / "checkpoint.json").write_text("{not json")
    assert main(["optimize", str(small_config), "--resume", str(out)]) == 2
    assert "damaged checkpoint" in capsys.readouterr().err
    # (an integer Python refuses to read: a ValueError traceback; deep nesting)
    (out / "checkpoint.json").write_text('{"generation": ' + "9" * 5000 + "}")
    assert main(["optimize", str(small_config), "--resume", str(out)]) == 2
    assert "damaged checkpoint: an integer of more digits" in capsys.readouterr().err
    (out / "checkpoint.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["optimize", str(small_config), "--resume", str(out)]) == 2
    assert "damaged checkpoint: nested too deeply" in capsys.readouterr().err


def test_optimize_and_simulate_agree_on_a_nics_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """t1 and t2 share n1, only t1 names a default: both commands give t2 that default
    (simulate gave t2 PF_RING's while optimize silently took t1's)."""
    config = tmp_path / "twodef.yaml"
    config.write_text(yaml.safe_dump({
        "hosts": {"h1": {"cores": 2}}, "nics": {"n1": {"host": "h1", "link": "10Gbit/s"}},
        "transmissions": [
            {"id": t, "nic": "n1", "size": "1MB", "packet_size": 1400, "rate": "3600pps",
             **extra} for t, extra in (("t1", {"default": {"mode": "active_wait"}}),
                                       ("t2", {}))]}))
    assert main(["simulate", str(config), "--engine", "fast", "--json"]) == 0
    simulated = [r["setting"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert main(["optimize", str(config), "--out", str(tmp_path / "r"), *FAST,
                 "--verify", "none"]) == 0
    plan = load_plan(tmp_path / "r" / "plan.yaml")
    planned = [e.default_setting.to_json() for e in plan.entries]
    assert planned == simulated and {s["mode"] for s in planned} == {"active_wait"}


def test_optimizer_resume_keeps_the_runs_verify_and_prefer_unless_given(
        small_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    assert main(["optimize", str(small_config), "--out", str(out), *FAST, "--verify", "none",
                 "--prefer", "interrupts"]) == 0
    capsys.readouterr()
    assert main(["optimize", str(small_config), "--resume", str(out), "--generations",
                 "4"]) == 0
    err = capsys.readouterr().err
    meta = load_plan(out / "plan.yaml").meta
    assert (meta["verify"], meta["prefer"]) == ("none", "interrupts")
    assert "checking the plan" not in err and "gen    4/4" in err
    assert "has reached generation" not in err
    assert main(["optimize", str(small_config), "--resume", str(out), "--generations", "4",
                 "--prefer", "balanced"]) == 0
    assert load_plan(out / "plan.yaml").meta["prefer"] == "balanced"
    err = capsys.readouterr().err
    assert "checking the plan" not in err
    # (at the generation reached nothing runs, and the run says so: it was silent)
    assert "the checkpoint has reached generation 4 (--generations 4): no generation " \
           "runs, the plan is picked again" in err
    saved = json.loads((out / "checkpoint.json").read_text())
    assert (saved["options"]["verify"], saved["options"]["prefer"]) == ("none", "balanced")
    for key in ("verify", "prefer"):  # a checkpoint written before they were saved
        del saved["options"][key]
    (out / "checkpoint.json").write_text(json.dumps(saved))
    assert main(["optimize", str(small_config), "--resume", str(out), "--generations",
                 "4"]) == 0
    assert load_plan(out / "plan.yaml").meta["verify"] == "des"
    saved["options"]["verify"] = "sometimes"
    (out / "checkpoint.json").write_text(json.dumps(saved))
    assert main(["optimize", str(small_config), "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "damaged checkpoint" in err and "'sometimes'" in err


def _settings(plan_path: Path) -> list[tuple[dict, dict]]:
    doc = yaml.safe_load(plan_path.read_text())
    return [(t["setting"], t["predicted"]["optimized"]) for t in doc["transmissions"]]


def test_optimizer_dask_local_cluster_equals_a_local_run(small_config: Path,
                                                        tmp_path: Path) -> None:
    """DES-evaluated search on a 2-worker LocalCluster (and on a 2-process pool) gives the
    local run's plan."""
    args = ["optimize", str(small_config), "--engine", "des", "--population", "8",
            "--generations", "2", "--seed", "3", "--json"]
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    assert main([*args, "--out", str(tmp_path / "dask"), "--dask", "local"]) == 0
    assert main([*args, "--out", str(tmp_path / "pool"), "--workers", "2"]) == 0
    local = json.loads((tmp_path / "local" / "checkpoint.json").read_text())
    for other in ("dask", "pool"):
        assert _settings(tmp_path / "local" / "plan.yaml") == _settings(
            tmp_path / other / "plan.yaml")
        b = json.loads((tmp_path / other / "checkpoint.json").read_text())
        assert local["population"] == b["population"] and local["archives"] == b["archives"]


def test_output_directories_are_checked_before_the_search(
        small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The default runs/<stem> and a directory where an output goes were found only when
    the results were written, after the whole search (a review: tracebacks)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("a file where the default directory goes")
    assert main(["optimize", str(small_config), *FAST, "--verify", "none"]) == 2
    err = capsys.readouterr().err
    assert "the default output directory (give --out): cannot write runs/small" in err
    assert len(err.strip().splitlines()) == 1
    out = tmp_path / "run"
    (out / "summary.md").mkdir(parents=True)
    assert main(["optimize", str(small_config), "--out", str(out), *FAST,
                 "--verify", "none"]) == 2
    assert "summary.md is a directory" in capsys.readouterr().err


def test_a_run_removes_the_last_runs_plan_first(
        small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A run that failed writing its results left the last run's plan.yaml beside its own
    checkpoint and reports: a later deploy would have pushed the wrong plan."""
    out = tmp_path / "run"
    assert main(["optimize", str(small_config), "--out", str(out), *FAST,
                 "--verify", "none"]) == 0
    assert (out / "plan.yaml").exists()
    capsys.readouterr()
    # bad input removes nothing: a resume against a changed config is refused first
    changed = tmp_path / "changed.yaml"
    changed.write_text(small_config.read_text().replace("4000pps", "4100pps"))
    assert main(["optimize", str(changed), "--resume", str(out)]) == 2
    assert "config changed" in capsys.readouterr().err and (out / "plan.yaml").exists()

    def full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device", str(out / "pareto.png"))

    monkeypatch.setattr("nictune.optimizer.export.write_plots", full)
    assert main(["optimize", str(small_config), "--out", str(out), *FAST, "--seed", "3",
                 "--verify", "none"]) == 1
    err = capsys.readouterr().err
    assert f"cannot write the results to {out} (pareto.png): No space left" in err
    assert not (out / "plan.yaml").exists()


def test_a_checkpoint_that_cannot_be_written_is_one_line(
        small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("nictune.optimizer.search.save_checkpoint", full)
    out = tmp_path / "run"
    assert main(["optimize", str(small_config), "--out", str(out), *FAST,
                 "--checkpoint-every", "1", "--verify", "none"]) == 1
    err = capsys.readouterr().err
    assert f"cannot write the checkpoint in {out}: No space left on device" in err
    assert "Traceback" not in err


def test_optimizer_ctrl_c_exits_130_and_keeps_the_checkpoint(small_config: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nictune", "optimize", str(small_config), "--out", str(out),
         "--population", "16", "--generations", "100000", "--checkpoint-every", "1",
         "--verify", "none"], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while not (out / "checkpoint.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-500:]
    assert "interrupted at generation" in err and f"--resume {out}" in err
    assert "Traceback" not in err
    saved = json.loads((out / "checkpoint.json").read_text())
    assert saved["generation"] >= 1
    assert not (out / "plan.yaml").exists()


def _interrupting(at: int, masked: bool, twice: bool):
    """A progress callback that sends this process SIGINT during generation `at`: once
    (stop after the generation), or twice — the second, if `masked`, turned into a
    TypeError as NumPy does to a KeyboardInterrupt raised inside some of its C code."""
    def progress(gen: int, *_: object) -> None:
        if gen != at:
            return
        os.kill(os.getpid(), signal.SIGINT)
        if not twice:
            return
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # (the handler runs here at the latest)
        except KeyboardInterrupt as exc:
            if masked:
                raise TypeError("Cannot compare structured arrays") from exc
            raise
    return progress


@pytest.mark.parametrize(("twice", "masked", "saved"), [(False, False, 3), (True, False, 2),
                                                         (True, True, 2)])
def test_ctrl_c_stops_after_the_generation_or_at_once_the_second_time(
        small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], twice: bool, masked: bool, saved: int) -> None:
    """One Ctrl-C finishes and saves the generation under way; a second stops at once,
    also when a library turned its KeyboardInterrupt into another error (seen in CI: a
    TypeError out of np.unique, with a traceback instead of exit 130)."""
    interrupt = _interrupting(3, masked, twice)
    monkeypatch.setattr(_Progress, "generation", lambda self, *a: interrupt(*a))
    out = tmp_path / "run"
    rc = main(["optimize", str(small_config), "--out", str(out), "--population", "8",
               "--generations", "50", "--checkpoint-every", "1", "--verify", "none"])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "stopping after this generation" in err and f"--resume {out}" in err
    assert json.loads((out / "checkpoint.json").read_text())["generation"] == saved
    assert not (out / "plan.yaml").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize(("where", "verify", "stage"), [
    ("export.write_plots", "none", "writing the results"),
    ("cli.outcome", "des", "checking the plan")])
def test_ctrl_c_after_the_search_names_what_it_stopped(
        small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], where: str, verify: str, stage: str) -> None:
    """Ctrl-C after the last generation — while the plots are drawn (minutes of reports at
    thousands of transmissions) or the DES checks the plan: it said "interrupted at
    generation 3", as if the search had been cut short."""
    from nictune.optimizer import cli, export

    module, name = {"export": export, "cli": cli}[where.split(".")[0]], where.split(".")[1]
    real = getattr(module, name)

    def interrupted(*args: object) -> object:
        result = real(*args)  # (the real work, then the interrupt)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # (the handler runs here at the latest)
        return result

    monkeypatch.setattr(module, name, interrupted)
    out = tmp_path / "run"
    rc = main(["optimize", str(small_config), "--out", str(out), *FAST,
               "--checkpoint-every", "1", "--verify", verify, "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert f"interrupted while {stage}; the last checkpoint" in err
    assert "at generation" not in err.split("interrupted")[-1]
    assert not (out / "plan.yaml").exists()


def test_ctrl_c_before_this_run_s_first_checkpoint_does_not_offer_an_earlier_one(
        small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An earlier run's checkpoint in --out, this run stopped at once in generation 0:
    it said "the last checkpoint (generation 2) is in …; continue with --resume", which
    then refused it (another config). Only this run's checkpoint is offered."""
    first = tmp_path / "first"
    assert main(["optimize", str(small_config), "--out", str(first), *FAST,
                 "--checkpoint-every", "1", "--verify", "none"]) == 0
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.json").write_text(json.dumps({"generation": 2}))
    interrupt = _interrupting(0, False, True)
    monkeypatch.setattr(_Progress, "generation", lambda self, *a: interrupt(*a))
    rc = main(["optimize", str(small_config), "--out", str(out), "--population", "8",
               "--generations", "50", "--checkpoint-every", "5", "--verify", "none"])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "no checkpoint was written yet" in err and "--resume" not in err
    # resumed from another directory into this one: that one's checkpoint is the run's
    (out / "checkpoint.json").write_text(json.dumps({"generation": 7}))
    interrupt = _interrupting(4, False, True)
    monkeypatch.setattr(_Progress, "generation", lambda self, *a: interrupt(*a))
    assert main(["optimize", str(small_config), "--resume", str(first), "--out", str(out),
                 "--generations", "50", "--checkpoint-every", "100", "--verify",
                 "none"]) == 130
    err = capsys.readouterr().err
    assert "no checkpoint was written yet" in err and "generation 7" not in err


def test_des_runs_use_the_cpus_by_default() -> None:
    """No DES runs: one process; verification: at most the two tasks per host; a DES
    search: every CPU."""
    cpus, plenty = len(os.sched_getaffinity(0)), 1 << 50
    assert default_workers("fast", "none", 4) == 1
    assert default_workers("fast", "des", 4, plenty) == min(cpus, 8)
    assert default_workers("fast", "des", 1, plenty) == min(cpus, 2)
    assert default_workers("des", "none", 1, plenty) == cpus


def test_des_workers_fit_the_available_memory(tmp_path: Path) -> None:
    """A DES worker may hold ~2 GB: a worker per CPU on a 64-CPU node with 16 GB free
    would be killed; the default is one per 2 GiB available, at least one."""
    from nictune.optimizer.cli import WORKER_MEMORY
    from nictune.simulator import des

    # (a worker's share covers the largest window the DES grows to)
    assert WORKER_MEMORY >= des.GROWN_PACKETS * des.PACKET_BYTES
    cpus = len(os.sched_getaffinity(0))
    assert default_workers("des", "none", 1, 3 << 30) == 1
    assert default_workers("des", "none", 1, 0) == 1
    assert default_workers("fast", "des", 8, 4 << 30) == min(cpus, 2)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    4194304 kB\n")
    assert available_memory(meminfo) == 4 << 30
    meminfo.write_text("MemTotal:       24000000 kB\n")  # (kernels before 3.14)
    assert available_memory(meminfo) is None
    assert available_memory(tmp_path / "absent") is None
    assert (available_memory() or 0) > 0  # (this Linux node's)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_containers_memory_limit_caps_the_available_memory(tmp_path: Path,
                                                             version: str) -> None:
    """MemAvailable is the node's: a container limited to 4 GiB on a big node would start
    a worker per CPU. The cgroup's limit minus its usage caps it; no limit leaves it."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:    268435456 kB\n")  # 256 GiB
    cgroups, root = tmp_path / "cgroup", tmp_path / "fs"
    if version == "v2":
        cgroups.write_text("0::/box\n")
        where, limit, usage = root / "box", "memory.max", "memory.current"
    else:
        cgroups.write_text("4:memory:/box\n3:cpuset:/\n")
        where, limit, usage = root / "memory" / "box", "memory.limit_in_bytes", \
            "memory.usage_in_bytes"
    where.mkdir(parents=True)
    (where / limit).write_text(f"{4 << 30}\n")
    (where / usage).write_text(f"{1 << 30}\n")
    assert available_memory(meminfo, cgroups, root) == 3 << 30
    (where / limit).write_text("max\n" if version == "v2" else "9223372036854771712\n")
    assert available_memory(meminfo, cgroups, root) == 256 << 30
    # a container without a cgroup namespace: /proc names its host's path, the mount's top
    # is its own cgroup
    cgroups.write_text(cgroups.read_text().replace("/box", "/docker/abc"))
    (where / limit).write_text(f"{4 << 30}\n")
    top = where.parent
    (top / limit).write_text(f"{2 << 30}\n")
    (top / usage).write_text(f"{1 << 30}\n")
    assert available_memory(meminfo, cgroups, root) == 1 << 30


def test_without_cpu_affinity_the_cpu_count_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where os.sched_getaffinity does not exist (macOS), os.cpu_count() counts the CPUs
    (a rename once made this branch call a function that does not exist)."""
    monkeypatch.delattr(os, "sched_getaffinity")
    assert default_workers("des", "none", 1, 1 << 50) == (os.cpu_count() or 1)


def test_des_runs_in_a_log_are_counted_at_most_every_interval(
        capsys: pytest.CaptureFixture[str]) -> None:
    every = _Progress(tty=False, every=0.0)
    every.des_run(3, 6, "des")
    every.des_run(4, 6, "fast")  # fast-engine runs take milliseconds: not counted
    assert capsys.readouterr().err == "  DES runs 3/6\n"
    rarely = _Progress(tty=False, every=3600.0)
    rarely.des_run(5, 6, "des")
    assert capsys.readouterr().err == ""


def test_progress_lines_in_a_log(capsys: pytest.CaptureFixture[str]) -> None:
    log = _Progress(tty=False)
    log.generation(0, 5, 1.25, 3, 0.05)  # a DES generation: minutes for 16 individuals
    log.generation(5, 5, 1.25, 3, 2950.4)
    assert capsys.readouterr().err.splitlines() == [
        "gen    0/5 [--------------------] throughput plan +1.250 %, front 3, 0.05 evals/s",
        "gen    5/5 [####################] throughput plan +1.250 %, front 3, 2,950 evals/s"]


def test_progress_on_a_terminal_keeps_the_generation_beside_the_des_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One line rewritten in place (and cleared to its end, so a shorter line leaves
    nothing behind): the last generation, the DES runs of the next one appended, the
    generation alone again when they are done; a newline after the last generation."""
    term = _Progress(tty=True)
    term.des_run(1, 4, "des")  # the defaults' runs, before any generation
    term.des_run(4, 4, "des")
    term.generation(0, 2, 0.5, 2, 0.1)
    gen0 = "gen    0/2 [--------------------] throughput plan +0.500 %, front 2, 0.1 evals/s"
    term.des_run(2, 8, "des")
    term.des_run(8, 8, "des")
    term.generation(2, 2, 0.75, 4, 0.2)
    term.des_run(1, 2, "des")  # the plan's check, after the search
    assert capsys.readouterr().err == "".join([
        "\r  DES runs 1/4\033[K", "\r\033[K", f"\r{gen0}\033[K",
        f"\r{gen0} · DES runs 2/8\033[K", f"\r{gen0}\033[K",
        "\rgen    2/2 [####################] throughput plan +0.750 %, front 4, 0.2 evals/s"
        "\033[K\n", "\r  DES runs 1/2\033[K"])


def test_help_names_the_config_and_dask_as_simulate_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    usage = capsys.readouterr().out
    assert usage.startswith("usage: nictune optimize [-h]") and " CONFIG\n" in usage
    assert "[--dask ADDRESS|local]" in usage


def _cut(key: str, keep: int):
    return lambda doc: doc.__setitem__(key, doc[key][:keep])


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory, small_config_text: str
            ) -> tuple[Path, str]:
    """The small config and the checkpoint a short run of it writes (one run for all the
    damaged-checkpoint cases)."""
    base = tmp_path_factory.mktemp("one-run")
    config = base / "small.yaml"
    config.write_text(small_config_text)
    assert main(["optimize", str(config), "--out", str(base / "r"), *FAST, "--verify",
                 "none", "--json"]) == 0
    return config, (base / "r" / "checkpoint.json").read_text()


@pytest.mark.parametrize("damage, named", [
    (_cut("population", 3), "3 individuals"),
    (_cut("crowding", 2), "2 crowding distances"),
    (lambda d: d["population"][0].pop(), "do not fit"),  # one short gene row
    (lambda d: d.__setitem__("fitness", [f[:1] for f in d["fitness"]]), "wrong shape"),
    (lambda d: d.__setitem__("numpy_state", {}), "numpy_state"),
    (_cut("archives", 0), "host archive"),
    (lambda d: d["archives"][0].__setitem__("genes", [[1.0, 2.0, 3.0]]), "genes"),
    (lambda d: d["options"].__setitem__("checkpoint_every", 0), "checkpoint_every 0"),
    (lambda d: d["options"].__setitem__("engine", "xyz"), "engine 'xyz'"),
    (lambda d: d.__setitem__("generation", -3), "generation -3"),
    # (a TypeError in export.write_csvs after the run, with its outputs half-written; a
    # null gene ran silently as NaN)
    (lambda d: d.__setitem__("logbook", 5), "logbook: expected a list"),
    (lambda d: d["logbook"][-1].__setitem__("front", "x"), "logbook: a malformed row"),
    (lambda d: d["population"][0].__setitem__(0, None), "not finite numbers"),
    (lambda d: d["population"][0].__setitem__(0, "nan"), "not finite numbers"),
    # (a review: IndexError and ValueError tracebacks from the archive's pick)
    (lambda d: d["archives"][0].__setitem__("values", []), "differ in length"),
    (lambda d: d["archives"][0].__setitem__("violation", []), "differ in length"),
    (lambda d: d["archives"][0].__setitem__("worst", []), "differ in length"),
    (lambda d: d["archives"][0]["values"][0].__setitem__(0, float("nan")), "not a finite"),
    (lambda d: d["options"].__setitem__("population", 2), "population 2"),
    # (a review: an OverflowError, a ValueError inside NumPy, a NaN accepted silently)
    (lambda d: d.__setitem__("generation", float("inf")), "infinity"),
    (lambda d: d["options"].__setitem__("population", 10 ** 30), "population"),
    (lambda d: d["fitness"][0].__setitem__(0, float("nan")), "not a finite number"),
])
def test_a_damaged_checkpoint_is_one_line_exit_2(
        one_run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        damage, named: str) -> None:
    """Found by a review: each of these was a traceback (zip, numpy, DEAP, a division by
    zero) or, for the engine and the generation, ran silently."""
    config, text = one_run
    out = tmp_path / "r"
    out.mkdir()
    doc = json.loads(text)
    damage(doc)
    (out / "checkpoint.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["optimize", str(config), "--resume", str(out), "--generations", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "damaged checkpoint" in err and named in err and "\n" not in err, err


def test_a_checkpoint_that_is_not_text_is_one_line_exit_2(
        small_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    out.mkdir()
    (out / "checkpoint.json").write_bytes(b"\xff\xfe" + os.urandom(200))
    assert main(["optimize", str(small_config), "--resume", str(out)]) == 2
    assert "damaged checkpoint: not UTF-8 text" in capsys.readouterr().err


def test_a_terminal_is_told_what_the_wait_before_generation_0_is(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A first run after an install compiles the fast engine for ~15 s before generation
    0's line: on a terminal a line says so, and generation 0's replaces it; logs get
    nothing."""
    term = _Progress(tty=True)
    term.starting("fast")
    term.generation(0, 2, 0.5, 2, 100.0)
    err = capsys.readouterr().err
    assert err.startswith("\revaluating generation 0 (the first run after an install also "
                          "compiles the fast engine, ~15 s)…\033[K\rgen    0/2")
    _Progress(tty=True).starting("des")
    assert capsys.readouterr().err == "\revaluating generation 0…\033[K"
    _Progress(tty=False).starting("fast")
    assert capsys.readouterr().err == ""


def test_a_checkpoint_of_format_1_is_refused_on_resume(
        small_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Format 1's archives kept settings the worst-end rule excludes: resumed, the lab's
    t-rx2 got its 1 s poll back (a review)."""
    out = tmp_path / "r"
    assert main(["optimize", str(small_config), "--out", str(out), *FAST, "--verify",
                 "none"]) == 0
    doc = json.loads((out / "checkpoint.json").read_text())
    assert doc["nictune_checkpoint"] == 2
    (out / "checkpoint.json").write_text(json.dumps({**doc, "nictune_checkpoint": 1}))
    capsys.readouterr()
    assert main(["optimize", str(small_config), "--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "a checkpoint of an earlier nictune (format 1)" in err and "start a new run" in err
