"""The sender's command: hping3 under a time limit, stoppable, and its sending time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nictune.errors import RunError
from nictune.validation import remote, runner, traffic

DATA = Path(__file__).with_name("data")


def count_run(rc: int, received: int | None = None) -> tuple[dict, traffic.TrafficSpec]:
    raw = json.loads((DATA / "hping3-count.json").read_text())
    if received is not None:
        raw["stderr"] = raw["stderr"].replace("5 packets received", f"{received} packets "
                                                                    "received")
    raw["rc"] = rc
    return raw, traffic.TrafficSpec(**raw["spec"])


def test_the_linger_is_taken_off_only_when_a_reply_is_missing() -> None:
    raw, spec = count_run(0)
    some = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)
    assert some.duration_s == pytest.approx(some.wall_s - traffic.LINGER_S)
    raw, spec = count_run(0, received=500)  # every reply back: hping3 exits at once
    every = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)
    assert every.duration_s == every.wall_s and every.rate_pps < some.rate_pps


def test_a_paced_run_stopped_at_its_limit_is_kept_and_sender_limited() -> None:
    raw, spec = count_run(124)  # `timeout` ended it
    sent = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)
    assert sent.stopped and sent.duration_s == sent.wall_s  # no linger after SIGINT
    agent = {"packets": 500, "bytes": 500 * 1400, "first_arrival": 0.0, "last_arrival": 0.1,
             "last_delivery": 0.1, "ring_drops": 0, "wakeups": 500, "empty_wakeups": 0,
             "cpu_s": 0.01, "context_switches": 500, "stranded": 0, "backend": "af_packet",
             "ring": 4096, "notes": []}
    counts = {"rx_drop": 0, "nic_drops": 0, "drops_before_ring": 0, "nic_interrupts": 0,
              "net_rx_softirqs": 0}
    raw_run = {"agent": agent, "sender": sent.to_json(), "counters": counts,
               "spec": {"target_rate_pps": 1.0}}  # a rate the sender easily beat
    assert remote.derive(raw_run)["limited_by"] == ["sender"]
    raw_run["sender"]["stopped"] = False
    assert remote.derive(raw_run)["limited_by"] == ["offered rate"]



def test_a_short_run_paced_on_the_wire_is_not_sender_limited() -> None:
    """hping3's start-up (~50 ms) is in the sender's own time: 0.3 s runs at 1 000 pps
    read 806–824 pps there while 937–943 arrived per second — "limited by sender" for
    runs that paced the wire (a review's runs). The wire's pace decides now; a sender
    short on the wire too is still limited."""
    raw, spec = count_run(0)
    sent = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec).to_json()
    sent["rate_pps"] = 820.0
    n = sent["transmitted"]
    agent = {"packets": n, "bytes": n * 1400, "first_arrival": 0.0,
             "last_arrival": (n - 1) / 940.0, "last_delivery": n / 940.0, "ring_drops": 0,
             "wakeups": n, "empty_wakeups": 0, "cpu_s": 0.01, "context_switches": n,
             "stranded": 0, "backend": "af_packet", "ring": 4096, "notes": []}
    counts = {"rx_drop": 0, "nic_drops": 0, "drops_before_ring": 0, "nic_interrupts": 0,
              "net_rx_softirqs": 0}
    run = {"agent": agent, "sender": sent, "counters": counts,
           "spec": {"target_rate_pps": 1000.0}}
    assert remote.derive(run)["limited_by"] == ["offered rate"]
    agent["last_arrival"] = (n - 1) / 820.0
    assert remote.derive(run)["limited_by"] == ["sender"]


def test_an_agent_result_with_packets_but_no_arrival_times_is_refused() -> None:
    """It passed the field checks and failed in `derive` with a TypeError traceback."""
    result = {"counters_before": {}, "counters_after": {}, "packets": 5, "bytes": 7000,
              "wakeups": 5, "ring_drops": 0, "context_switches": 5, "empty_wakeups": 0,
              "stranded": 0, "cpu_s": 0.001, "first_arrival": 1.0, "last_arrival": 1.5,
              "last_delivery": 1.5, "backend": "af_packet", "notes": [], "ring": None}
    assert remote.agent_result("rx1", json.dumps(result))["packets"] == 5
    for first, last in ((1.0, None), (None, 1.5), (1.5, 1.0)):
        result.update(first_arrival=first, last_arrival=last)
        with pytest.raises(RunError, match="rx1: the agent's result has 5 packets but "
                                           "arrivals from"):
            remote.agent_result("rx1", json.dumps(result))


def test_drops_before_the_ring_are_counted_once() -> None:
    """7 drops that /proc/net/dev and ethtool -S both show are 7, beside the ring's 2."""
    raw, spec = count_run(0)
    sent = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)
    agent = {"packets": 491, "bytes": 491 * 1400, "first_arrival": 0.0, "last_arrival": 0.1,
             "last_delivery": 0.1, "ring_drops": 2, "wakeups": 491, "empty_wakeups": 0,
             "cpu_s": 0.01, "context_switches": 491, "stranded": 0, "backend": "af_packet",
             "ring": 4096, "notes": []}
    counts = {"rx_drop": 7, "nic_drops": 7, "drops_before_ring": 7, "nic_interrupts": 0,
              "net_rx_softirqs": 0}
    run = remote.derive({"agent": agent, "sender": sent.to_json(), "counters": counts,
                         "spec": {"target_rate_pps": None}})
    assert run["drops"] == 9


def test_the_time_limit_is_three_times_the_nominal_run_plus_a_minute() -> None:
    spec = traffic.TrafficSpec("t", "10.0.0.2", 1, 1400, 10_000, 100)
    assert traffic.time_limit(spec) == pytest.approx(10_000 * 100e-6 * 3 + 60)
    assert traffic.time_limit(traffic.flood_spec("t", "10.0.0.2", 1, 64, 2.5)) == 2.5
    assert "timeout -s INT 63 hping3" in traffic.hping3_command(spec, "/tmp/p")


def test_unrestored_names_each_host_and_the_rollback_command() -> None:
    assert runner.unrestored({"rx1": "rolled-back", "rx2": "applied"}, "inv.yaml") == ""
    text = runner.unrestored({"rx1": "FAILED: ssh: timeout", "rx2": "rolled-back",
                              "rx3": "FAILED: verify"}, "lab/inventory.yaml")
    assert text == ("could not restore rx1: ssh: timeout; rx3: verify (run `nictune "
                    "rollback --inventory lab/inventory.yaml --hosts rx1 rx3`)")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("hping3") is None,
                    reason="needs root and hping3 (make deb)")
def test_stop_command_ends_a_running_hping3_at_once(tmp_path: Path) -> None:
    """Real hping3 on loopback, paced for 1000 s: the pid file's SIGINT ends it."""
    spec = traffic.TrafficSpec("t", "127.0.0.1", 29_999, 200, 1_000_000, 1000)
    pidfile = str(tmp_path / "hping3.pid")
    sender = subprocess.Popen(["sh", "-c", traffic.hping3_command(spec, pidfile)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        # hping3 itself running under `timeout` (on a loaded machine 0.3 s was not always
        # enough for it to start and set up its SIGINT summary)
        while subprocess.run(["pgrep", "-P", Path(pidfile).read_text().strip(), "hping3"],
                             capture_output=True).returncode and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert subprocess.run(["sh", "-c", traffic.stop_command(pidfile)]).returncode == 0
        out, err = sender.communicate(timeout=10)
    finally:
        sender.kill()
    assert not os.path.exists(pidfile)
    assert 0 < traffic.parse_hping3(out, err, sender.returncode, spec).transmitted < 100_000
