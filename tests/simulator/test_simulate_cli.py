"""`nictune simulate` through nictune.cli.main, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from nictune.cli import main
from nictune.simulator.metrics import CONTRACT_KEYS

ROOT = Path(__file__).resolve().parents[2]

CONFIG = {
    "hosts": {"h": {"cores": 2}},
    "nics": {"n1": {"host": "h", "link": "10Gbit/s"},
             "n2": {"host": "h", "link": "10Gbit/s", "irq_core": 1}},
    "transmissions": [
        {"id": "a", "nic": "n1", "size": "3MB", "packet_size": 1000, "rate": "50kpps"},
        {"id": "b", "nic": "n2", "size": "250MB", "packet_size": 1000, "rate": "200kpps",
         "default": {"mode": "passive_wait", "poll_interval": "1ms", "irq_core": 1}},
    ],
}


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return str(path)


def results(capsys, *argv: str) -> list[dict]:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["results"]


def test_json_has_the_contract_keys_for_every_transmission(cfg, capsys):
    out = results(capsys, cfg)
    assert [r["transmission"] for r in out] == ["a", "b"]
    for r in out:
        assert set(CONTRACT_KEYS) <= set(r)
        assert set(r["setting"]) >= {"mode", "poll_interval_s", "watermark",
                                     "watermark_timeout_s", "ring_slots", "irq_core"}
        assert r["engine"] == "des"
    a, b = out
    assert a["setting"]["mode"] == "watermark" and a["setting"]["watermark"] == 128  # PF_RING
    assert b["setting"] == {"mode": "passive_wait", "poll_interval_s": pytest.approx(1e-3),
                            "watermark": None, "watermark_timeout_s": None,
                            "ring_slots": 4096, "irq_core": 1, "placement": "same_core"}
    assert b["extrapolated"] and b["window_packets"] == 200_000
    assert not a["extrapolated"] and a["packets_offered"] == 3000


def test_setting_options_override_the_default_with_units(cfg, capsys):
    (b,) = results(capsys, cfg, "--transmission", "b", "--poll-interval", "500us",
                   "--ring-slots", "1024")
    assert b["setting"]["poll_interval_s"] == pytest.approx(500e-6)
    assert b["setting"]["ring_slots"] == 1024 and b["setting"]["irq_core"] == 1
    assert b["interrupts"] == pytest.approx(b["duration_s"] / 500e-6, rel=0.01)
    (a,) = results(capsys, cfg, "--transmission", "a", "--mode", "watermark", "--watermark",
                   "10", "--watermark-timeout", "0")
    assert a["setting"]["watermark_timeout_s"] == 0 and a["empty_wakeups"] == 0
    assert a["packets_stranded"] < 10 and 250 < a["interrupts"] <= 300
    (a,) = results(capsys, cfg, "--transmission", "a", "--mode", "busy_poll", "--exact",
                   "--engine", "des")
    assert a["interrupts"] == 0 and a["cpu_util"] == pytest.approx(1.0)


def test_exact_and_seed(cfg, capsys):
    (b,) = results(capsys, cfg, "--transmission", "b", "--exact")
    assert not b["extrapolated"] and b["window_packets"] == 250_000
    one = results(capsys, cfg, "--seed", "3")
    assert results(capsys, cfg, "--seed", "3") == one
    assert results(capsys, cfg, "--seed", "4") != one


def test_fast_engine(cfg, capsys):
    out = results(capsys, cfg, "--engine", "fast")
    assert [r["engine"] for r in out] == ["fast", "fast"]


def test_fast_engine_says_where_its_interrupts_are_approximate(cfg, capsys):
    """On a shared IRQ core the fast engine's wake-up counts are its least faithful
    (docs/engines.md); the user is told so, on stderr, and JSON stays clean."""
    def stderr(*argv: str) -> str:
        assert main(["simulate", *argv, "--json"]) == 0
        captured = capsys.readouterr()
        assert len(json.loads(captured.out)["results"]) == 2
        return captured.err

    assert "note:" not in stderr(cfg, "--engine", "fast", "--mode", "watermark",
                                 "--watermark", "32", "--watermark-timeout", "1ms")
    shared = dict(CONFIG, nics={**CONFIG["nics"], "n2": {**CONFIG["nics"]["n2"], "irq_core": 0}},
                  transmissions=[CONFIG["transmissions"][0],
                                 {**CONFIG["transmissions"][1], "default": {
                                     "mode": "passive_wait", "poll_interval": "1ms"}}])
    path = cfg.replace("c.yaml", "shared.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(shared, fh)
    err = stderr(path, "--engine", "fast")
    assert "note: 2 of 2 transmissions share their IRQ core with others" in err
    assert "--engine des is the reference" in err
    assert "interrupt counts and latencies are approximations" in err
    assert "note:" not in stderr(path)  # the DES is the reference: no note
    # core 0 of two hosts is two cores
    apart = dict(shared, hosts={"h": {"cores": 2}, "g": {"cores": 2}},
                 nics={**shared["nics"], "n2": {**shared["nics"]["n2"], "host": "g"}})
    with open(path, "w") as fh:
        yaml.safe_dump(apart, fh)
    assert "note:" not in stderr(path, "--engine", "fast")


def test_a_nic_whose_transmissions_ask_more_than_its_link_is_noted(tmp_path, capsys):
    """Each transmission is capped at its NIC's link alone; two at 1 Gbit/s on a 1 Gbit/s
    NIC arrived at 2 together (a review). simulate and optimize say so on stderr."""
    raw = {"hosts": {"h": {"cores": 2}}, "nics": {"n1": {"host": "h", "link": "1Gbit/s"}},
           "transmissions": [{"id": i, "nic": "n1", "size": 450000, "packet_size": 1500,
                              "rate": "1Gbit/s", "arrival": "cbr"} for i in ("a", "b")]}
    path = tmp_path / "over.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", str(path), "--engine", "fast", "--json"]) == 0
    err = capsys.readouterr().err
    assert "note: NIC n1: a, b ask 2 Gbit/s together of its 1 Gbit/s link" in err
    raw["transmissions"][0]["rate"] = raw["transmissions"][1]["rate"] = "0.45Gbit/s"
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", str(path), "--engine", "fast", "--json"]) == 0
    assert "NIC n1" not in capsys.readouterr().err


def test_table_by_default(cfg, capsys):
    assert main(["simulate", cfg]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "setting", "throughput", "delivered", "dropped",
                                "stranded", "interrupts", "cpu", "latency", "p99"]
    assert lines[1].startswith("a ") and "watermark W=128" in lines[1]
    assert lines[2].startswith("b~") and "passive_wait every 1 ms" in lines[2]
    assert "first 200000 packets" in lines[3]
    assert len({len(line) for line in lines[:3]}) <= 3  # aligned columns, trailing trimmed
    assert lines[1].index("bit/s") == lines[2].index("bit/s")


@pytest.mark.parametrize(("argv", "message"), [
    (["--mode", "passive_wait"], "options for a: poll_interval: is required"),
    (["--transmission", "b", "--mode", "watermark", "--watermark", "8"],
     "options for b: watermark_timeout: is required (0 for none"),
    (["--watermark", "4000"], "watermark: must be between 1 and 2048"),
    (["--poll-interval", "5us"], "poll_interval: is not used by mode watermark"),
    (["--mode", "passive_wait", "--poll-interval", "5 lightyears"], "unknown unit 'lightyears'"),
    (["--ring-slots", "10"], "ring_slots: must be between 64 and 32768"),
    # (a smaller ring against the default's watermark blamed a value not given)
    (["--transmission", "a", "--ring-slots", "64"],
     "got 128 (the default setting's watermark, kept: give --watermark too)"),
    (["--transmission", "zz"], "no transmission 'zz'"),
    # (accepted, and it did nothing)
    (["--engine", "fast", "--exact"], "--exact is for --engine des"),
])
def test_bad_options_exit_2_with_one_line(cfg, capsys, argv, message):
    assert main(["simulate", cfg, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_argparse_errors_and_bad_config_exit_2(tmp_path, cfg, capsys):
    with pytest.raises(SystemExit) as e:
        main(["simulate", cfg, "--engine", "warp"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["simulate", cfg, "--watermark", "many"])
    assert e.value.code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**CONFIG, "hostz": {}}))
    assert main(["simulate", str(bad)]) == 2
    assert "unknown key 'hostz'" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "missing.yaml")]) == 2


def argparse_error(capsys, *argv: str) -> str:
    """The one line argparse prints for a bad command line (exit 2, before any work)."""
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_negative_seed_is_refused_like_optimize_does(cfg, capsys):
    """(NumPy's seeding raised a ValueError traceback, exit 1, where arrivals are random;
    cbr ones silently took it.)"""
    for command in ("simulate", "optimize"):
        err = argparse_error(capsys, command, cfg, "--seed", "-1")
        assert f"nictune {command}: error: argument --seed: must be at least 0, got -1" in err


def test_unknown_arguments_are_the_sub_commands_error(cfg, capsys):
    """(They were the top level's: `nictune: error: ... (see nictune --help)`.)"""
    err = argparse_error(capsys, "simulate", cfg, "extra.yaml")
    assert err.startswith("nictune simulate: error: unrecognized arguments: extra.yaml")
    assert err.endswith("(see nictune simulate --help)\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["--mode", "passive_wait", "--poll-interval", "-1ms"],
     "poll_interval: must be between 1e-06 and 10 s, got -0.001"),
    (["--watermark-timeout", "-5ms"], "watermark_timeout: must be between 0 and 10 s"),
    (["--watermark", "-3"], "watermark: must be between 1 and 2048"),
])
def test_negative_values_get_the_range_message(cfg, capsys, argv, message):
    """`-1ms` is the option's value, not an unknown option ("expected one argument")."""
    assert main(["simulate", cfg, *argv]) == 2
    assert message in capsys.readouterr().err
    assert "expected one argument" in argparse_error(capsys, "simulate", cfg, "--poll-interval",
                                                     "--json")


def test_a_transmission_named_twice_is_simulated_once(cfg, capsys):
    """(`--transmission a --transmission a` printed two identical rows.)"""
    out = results(capsys, cfg, "--transmission", "b", "--transmission", "a",
                  "--transmission", "b", "--engine", "fast")
    assert [r["transmission"] for r in out] == ["b", "a"]


@pytest.mark.parametrize("engine", ["fast", "des"])
def test_a_selected_transmission_is_simulated_beside_its_host(tmp_path, capsys, engine):
    """a and b share core 0 (and the host's memory bus): `--transmission a` gives a's row of
    the whole config (it simulated a alone: b's load on the core was gone)."""
    doc = {**CONFIG, "nics": {"n1": CONFIG["nics"]["n1"], "n2": {**CONFIG["nics"]["n2"],
                                                              "irq_core": 0}}}
    doc["transmissions"] = [{**CONFIG["transmissions"][0], "default": {
        "mode": "passive_wait", "poll_interval": "50us"}}, {
        **CONFIG["transmissions"][1], "rate": "900kpps",
        "default": {"mode": "busy_poll", "irq_core": 0}}]
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(doc))
    whole = {r["transmission"]: r for r in results(capsys, str(path), "--engine", engine)}
    alone = results(capsys, str(path), "--transmission", "a", "--engine", engine)
    assert [r["transmission"] for r in alone] == ["a"] and alone[0] == whole["a"]
    path.write_text(yaml.safe_dump({**doc, "transmissions": doc["transmissions"][:1]}))
    without_b = results(capsys, str(path), "--engine", engine)[0]
    assert whole["a"]["empty_wakeups"] > 1.1 * without_b["empty_wakeups"]  # b is felt


def test_windows_of_several_sizes_are_given_as_their_range(cfg, capsys):
    """rack.yaml's footnote listed 21 window sizes for 24 rows, matched to none."""
    from dataclasses import replace

    from nictune.model import load_config
    from nictune.simulator.cli import table
    from nictune.simulator.fast import simulate as fast

    config = load_config(cfg)
    a, b = fast(config, {t.id: config.default_setting(t) for t in config.transmissions})
    text = table([replace(a, extrapolated=True, window_packets=2837),
                  replace(b, extrapolated=True, window_packets=1021231)])
    assert text.splitlines()[-1].startswith(
        "~ simulated over the first 2837–1021231 (--json: window_packets) packets")


def _one_core(tmp_path, **b: object) -> str:
    """CONFIG with b on a's core 0, b's fields (and default setting) changed as given."""
    raw = yaml.safe_load(yaml.safe_dump(CONFIG))
    raw["transmissions"][1].update(b)
    raw["transmissions"][1]["default"]["irq_core"] = 0
    path = tmp_path / "one-core.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _core_line(capsys, *argv: str) -> str:
    assert main(["simulate", *argv, "--engine", "fast"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "h core 0" in x]
    assert len(lines) == 1
    return lines[0]


def test_the_table_says_which_cores_take_several_transmissions(cfg, tmp_path, capsys):
    """A line per IRQ core that takes several transmissions: the most their CPU shares
    add up to at one moment (busy-pollers apart) and the packets they drop; none while
    each has a core of its own."""
    assert main(["simulate", cfg, "--engine", "fast"]) == 0
    assert "IRQ cores taking several" not in capsys.readouterr().out
    passive = {"mode": "passive_wait", "poll_interval": "1ms"}
    path = _one_core(tmp_path, default=passive)
    a, b = results(capsys, path, "--engine", "fast")
    line = _core_line(capsys, path)
    assert line == f"  h core 0: 2 transmissions, {100 * (a['cpu_util'] + b['cpu_util']):.3g} %"
    # one after the other they never load the core together: the larger share, not both
    # (a review: 154 % "saturated" for two streams of 77 % a second apart)
    path = _one_core(tmp_path, default=passive, start="1s")
    a, b = results(capsys, path, "--engine", "fast")
    assert a["duration_s"] < 1.0
    line = _core_line(capsys, path)
    assert line == f"  h core 0: 2 transmissions, {100 * max(a['cpu_util'], b['cpu_util']):.3g} %"
    # a busy-poller apart; drops said as a share of the core's packets
    path = _one_core(tmp_path, default={"mode": "busy_poll"})
    a, b = results(capsys, path, "--engine", "fast")
    assert _core_line(capsys, path) == (f"  h core 0: 2 transmissions, "
                                        f"{100 * a['cpu_util']:.3g} % + 1 busy-polled NIC")
    path = _one_core(tmp_path, default=passive, rate="1500kpps")
    a, b = results(capsys, path, "--engine", "fast")
    dropped = a["packets_dropped"] + b["packets_dropped"]
    assert dropped > 0
    offered = a["packets_offered"] + b["packets_offered"]
    assert _core_line(capsys, path).endswith(f", {100 * dropped / offered:.2g} % dropped")
    # only cores serving a transmission asked for, saying how many of theirs are shown
    assert _core_line(capsys, path, "--transmission", "a").startswith(
        "  h core 0: 2 transmissions (1 shown), ")


def test_a_reader_that_goes_away_ends_the_output_quietly(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`nictune simulate … --json | head -1` was a BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)  # (`head` has read its line and gone)
    out = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", out)
    try:
        code = main(["simulate", str(ROOT / "configs" / "paper-47.yaml"), "--engine", "fast",
                     "--json"])
    finally:
        monkeypatch.undo()
        out.close()
    assert code == 141
    assert "Traceback" not in capsys.readouterr().err


def _to_a_full_disk(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`nictune ARGV > /dev/full`: the exit code."""
    out = open("/dev/full", "w")  # noqa: SIM115 (closed below, after the undo)
    monkeypatch.setattr(sys, "stdout", out)
    try:
        return main(argv)
    finally:
        monkeypatch.undo()
        with contextlib.suppress(OSError):
            out.close()


def test_output_that_cannot_be_written_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`nictune simulate … > /dev/full` was an OSError traceback."""
    argv = ["simulate", str(ROOT / "configs" / "paper-47.yaml"), "--engine", "fast"]
    assert _to_a_full_disk(argv, monkeypatch) == 1
    assert capsys.readouterr().err == (
        "nictune simulate: failed: cannot write the output: No space left on device\n")


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["simulate", "--help"]])
def test_help_that_cannot_be_written_is_one_line(
        argv: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`nictune --help > /dev/full` exited 0 with nothing written (argparse ran before the
    output was watched)."""
    assert _to_a_full_disk(argv, monkeypatch) == 1
    assert capsys.readouterr().err == (
        "nictune: failed: cannot write the output: No space left on device\n")


def test_out_of_memory_is_one_line(tmp_path: Path) -> None:
    """`--exact` on 99 million packets (~8 GB) under a 1.5 GiB address-space limit (~0.9 GiB
    of it the interpreter and libraries; the first 792 MB array cannot fit, so the run
    fails in seconds): a MemoryError was a traceback; it is one line, exit 1."""
    import subprocess

    cfg = tmp_path / "big.yaml"
    cfg.write_text("hosts: {h: {cores: 2}}\nnics: {n: {host: h, link: 10Gbit/s}}\n"
                   "transmissions:\n  - {id: t, nic: n, size: 9.9GB, packet_size: 100, "
                   "rate: 1Gbit/s}\n")

    # the limit set in the child before it imports anything (one BLAS thread: each
    # reserves address space)
    small_node = ("import resource, runpy, sys; "
                  "resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29)); "
                  "sys.argv = ['nictune', *sys.argv[1:]]; "
                  "runpy.run_module('nictune', run_name='__main__')")
    for exact in (["--exact"], []):
        run = subprocess.run([sys.executable, "-c", small_node, "simulate", str(cfg), *exact],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        if not exact:  # (a window: it fits)
            assert run.returncode == 0, run.stderr
            continue
        assert run.returncode == 1, run.stderr
        assert run.stderr.startswith("nictune simulate: failed: out of memory")
        assert run.stderr.count("\n") == 1 and "without --exact" in run.stderr


def test_progress_in_a_log_is_a_line_at_most_every_few_seconds() -> None:
    """stderr not a terminal (a batch job's log): a long DES run said nothing until its
    table. A line per host finished once `every` has passed, none for a short run."""
    import argparse
    import io

    from nictune.model import load_config
    from nictune.simulator.cli import run_by_host

    config = load_config(ROOT / "configs" / "rack.yaml")
    settings = {t.id: config.default_setting(t) for t in config.transmissions}
    args = argparse.Namespace(engine="fast", seed=0, exact=False)
    for every, lines in ((0.0, 3), (3600.0, 0)):
        log = io.StringIO()
        run_by_host(config, config.transmissions, settings, args, log, every=every)
        printed = log.getvalue().splitlines()
        assert len(printed) == lines, printed
        assert all(re.fullmatch(r"simulated \d+/24 transmissions in \d+ s", p) for p in printed)
