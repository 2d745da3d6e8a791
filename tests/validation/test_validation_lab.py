"""End to end on `nictune lab` hosts: deploy each arm, send with hping3, count with the
agent, report; and a small calibration. Needs root, ip netns, sshd and hping3."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nictune.cli import main
from nictune.deploy.inventory import load_inventory
from nictune.deploy.lab import LabUnavailable, check_lab_possible, lab_hosts
from nictune.deploy.probe import probe_host
from nictune.deploy.transaction import read_knobs
from nictune.deploy.transport import Connection
from nictune.errors import RunError
from nictune.model import NicSetting, load_config
from nictune.plan import save_plan
from nictune.validation import runner
from nictune.validation.labplan import plan_for

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    try:
        check_lab_possible()
    except LabUnavailable as exc:
        pytest.skip(str(exc))
    if shutil.which("hping3") is None:
        pytest.skip("hping3 is not installed (make deb)")
    with lab_hosts(tmp_path_factory.mktemp("vlab"), hosts=3) as built:
        yield built


def test_validate_two_transmissions(lab, tmp_path: Path) -> None:
    config = load_config(lab.config)
    plan = plan_for(config, {
        "t-rx1": NicSetting("watermark", watermark=32, watermark_timeout=0.01),
        "t-rx2": NicSetting("active_wait")})
    save_plan(plan, tmp_path / "plan.yaml")
    out = tmp_path / "report"
    code = main(["validate", str(tmp_path / "plan.yaml"), "--inventory", str(lab.inventory),
                 "--sender", "sender", "--repeats", "3", "--scale", "0.05", "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "report.json").read_text())
    assert set(doc["restored"].values()) == {"rolled-back"}
    assert not [p for p in (lab.dir / ".nictune" / "snapshots").glob("rx*.json")
                if "rolled-back" not in p.name]  # live snapshots archived: host restored
    assert (out / "report.md").read_text().startswith("# nictune validation report")
    runs = doc["runs"]
    assert [(r["transmission"], r["arm"]) for r in runs[:4]] == [
        ("t-rx1", "default"), ("t-rx1", "optimized"), ("t-rx1", "default"),
        ("t-rx1", "optimized")]
    assert len(runs) == 12
    for r in runs:
        assert r["packets_received"] == r["packets_sent"] > 0  # nothing lost on the veth
        assert r["throughput_bps"] > 0 and r["paper_throughput_bps"] > 0
    t2 = next(t for t in doc["transmissions"] if t["transmission"] == "t-rx2")
    default, optimized = (t2["summary"][arm]["wakeups"]["mean"] for arm in
                          ("default", "optimized"))
    assert default * 5 < optimized  # same traffic: watermark(128) vs active_wait
    assert t2["not_applied"]["optimized"]  # veth lacks coalescing: listed, not hidden


def test_calibrate_writes_a_loadable_profile(lab, tmp_path: Path) -> None:
    profile = tmp_path / "rx1.yaml"
    # (runs long and fast enough that packet work shows above the noise: with 300-packet
    # runs a fit once charged nothing to packets or bytes, which no config takes; with
    # 0.3 s at 5 000 and 20 000 pps it did in 2 of about 10 runs of the twenty-eighth
    # session, so the faster points send 4× as many packets)
    code = main(["calibrate", "--inventory", str(lab.inventory), "--sender", "sender",
                 "--receiver", "rx1", "--out", str(profile), "--seconds", "0.4",
                 "--rates", "5000", "40000", "--sizes", "200", "1400",
                 "--modes", "active_wait", "watermark"])
    assert code == 0
    doc = yaml.safe_load(profile.read_text())
    assert set(doc["costs"]) == {"irq", "per_packet", "per_byte", "poll_check"}
    assert doc["fit"]["points"] == 8
    config = yaml.safe_load(lab.config.read_text())
    config["hosts"]["rx1"]["profile"] = str(profile)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    loaded = load_config(tmp_path / "config.yaml")
    assert loaded.hosts["rx1"].costs.irq >= 0 and loaded.hosts["rx2"].costs.irq == 4e-6


def test_a_deployed_host_gets_its_deployment_back(lab, tmp_path: Path) -> None:
    config = load_config(lab.config)
    plan = plan_for(config, {"t-rx2": NicSetting("passive_wait", poll_interval=0.002)})
    save_plan(plan, tmp_path / "plan.yaml")
    inventory = load_inventory(lab.inventory)
    host = inventory.hosts["rx2"]
    assert main(["deploy", str(tmp_path / "plan.yaml"), "--inventory",
                 str(lab.inventory)]) == 0
    try:
        with Connection(host) as conn:
            deployed = read_knobs(probe_host(conn))
        assert main(["validate", str(tmp_path / "plan.yaml"), "--inventory",
                     str(lab.inventory), "--sender", "sender", "--repeats", "1", "--scale",
                     "0.02", "--out", str(tmp_path / "r")]) == 0
        with Connection(host) as conn:
            assert read_knobs(probe_host(conn)) == deployed  # not rolled back to pre-nictune
    finally:
        assert main(["rollback", "--inventory", str(lab.inventory), "--hosts", "rx2"]) == 0


def test_a_sender_without_a_route_fails_with_exit_1_and_restores(
        lab, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = load_config(lab.config)
    save_plan(plan_for(config, {"t-rx2": NicSetting("active_wait")}), tmp_path / "plan.yaml")
    code = main(["validate", str(tmp_path / "plan.yaml"), "--inventory", str(lab.inventory),
                 "--sender", "rx1", "--repeats", "1", "--scale", "0.01"])
    assert code == 1
    assert "hping3" in capsys.readouterr().err
    assert not [p for p in (lab.dir / ".nictune" / "snapshots").glob("rx2*.json")
                if "rolled-back" not in p.name]
    assert_nothing_left(lab, "rx2")


def assert_nothing_left(lab, receiver: str) -> None:
    """No agent or hping3 still running, the agent's private directory deleted."""
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "/agent.py --iface" not in procs and "hping3 --udp" not in procs
    assert not list(Path(lab.host(receiver).root, "tmp").glob("nictune-validate.*"))


def test_a_lost_receiver_session_is_reconnected_to_restore_the_host(
        lab, tmp_path: Path) -> None:
    config = load_config(lab.config)
    plan = plan_for(config, {"t-rx2": NicSetting("active_wait")})
    inventory = load_inventory(lab.inventory)
    sshd = lab.host("rx2").sshd_pid

    def drop_the_session(message: str) -> None:
        if "optimized" in message:  # the default arm has run: the host is changed
            subprocess.run(["pkill", "-TERM", "-P", str(sshd)], check=True)
            time.sleep(0.5)

    with pytest.raises(RunError, match="rx2: connection lost") as err:
        runner.validate(plan, inventory, "sender", runner.Options(repeats=1, scale=0.01),
                        progress=drop_the_session)
    assert "could not restore" not in str(err.value)
    assert not [p for p in (lab.dir / ".nictune" / "snapshots").glob("rx2*.json")
                if "rolled-back" not in p.name]  # restored over a new session
    assert_nothing_left(lab, "rx2")


def test_ctrl_c_while_sending_stops_hping3_and_the_agent_and_restores(
        lab, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = load_config(lab.config)
    save_plan(plan_for(config, {"t-rx1": NicSetting("active_wait")}), tmp_path / "plan.yaml")
    main_thread = threading.get_ident()

    def interrupt_once_sending() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "hping3 --udp" in subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                                text=True).stdout:
                time.sleep(0.5)
                signal.pthread_kill(main_thread, signal.SIGINT)
                return
            time.sleep(0.05)

    threading.Thread(target=interrupt_once_sending, daemon=True).start()
    code = main(["validate", str(tmp_path / "plan.yaml"), "--inventory", str(lab.inventory),
                 "--sender", "sender", "--repeats", "1", "--duration", "60",
                 "--max-rate", "1000", "--out", str(tmp_path / "r")])
    assert code == 130 and "interrupted" in capsys.readouterr().err
    assert not [p for p in (lab.dir / ".nictune" / "snapshots").glob("rx1*.json")
                if "rolled-back" not in p.name]
    time.sleep(0.5)  # hping3 prints its summary and exits on SIGINT
    assert_nothing_left(lab, "rx1")
