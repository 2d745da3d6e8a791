"""Ctrl-C during a multi-host run: what finished is kept and printed, nothing more starts."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from nictune.cli import build_parser, main
from nictune.deploy import hosts_cli
from nictune.deploy.group import GroupInterrupted, GroupResult, HostOutcome, run_group
from nictune.deploy.hosts_cli import _exit
from nictune.deploy.inventory import HostInventory
from nictune.deploy.probe import HostProbe, ProbeError
from nictune.deploy.transaction import HostResult
from nictune.errors import RunError

# (an inventory's key_file must look like a private key; no connection reads this one)
# a real key (the inventory loads it) that no host trusts
FAKE_KEY = Ed25519PrivateKey.generate().private_bytes(
    Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()


def interrupted(hosts: list[HostInventory], one: Any, workers: int) -> GroupResult[Any]:
    """What `run_group` carries out of the Ctrl-C that `one` sends."""
    with pytest.raises(GroupInterrupted) as stop:
        run_group(hosts, one, workers=workers)
    return stop.value.result


def test_ctrl_c_keeps_what_finished_and_starts_nothing_more() -> None:
    hosts = [HostInventory(f"h{i}", "192.0.2.1") for i in range(4)]
    ran: list[str] = []

    def one(host: HostInventory) -> str:
        ran.append(host.name)
        if host.name == "h1":  # Ctrl-C while h1 runs: h1 still finishes
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
        return host.name

    assert threading.current_thread() is threading.main_thread()
    group = interrupted(hosts, one, 1)
    assert list(group.outcomes) == ["h0", "h1"] and group.succeeded == ["h0", "h1"]
    assert group.not_started == ["h2", "h3"] and ran == ["h0", "h1"]
    assert not group.ok and group.to_json()["not_started"] == ["h2", "h3"]


def test_ctrl_c_after_every_host_started_is_still_not_ok() -> None:
    """All hosts already running when Ctrl-C came (hosts <= workers): they finish, nothing
    is left unstarted, and the group still says it was interrupted."""
    hosts = [HostInventory(f"h{i}", "192.0.2.1") for i in range(2)]

    def one(host: HostInventory) -> str:
        if host.name == "h1":
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        return host.name

    group = interrupted(hosts, one, 4)
    assert group.succeeded == ["h0", "h1"] and group.not_started == []
    assert not group.ok
    assert group.to_json() == {"ok": False, "succeeded": ["h0", "h1"], "failed": {},
                               "not_started": []}


def test_ctrl_c_again_while_the_running_hosts_finish_is_ignored(
        capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C twice: the second came while the pool waited for the running host and cut
    the wait short — the host's transaction went on in its thread unseen, no results
    were printed. Now the running host still finishes and is reported."""
    hosts = [HostInventory(f"h{i}", "192.0.2.1") for i in range(3)]

    def one(host: HostInventory) -> str:
        if host.name == "h0":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
        return host.name

    group = interrupted(hosts, one, 1)
    assert group.succeeded == ["h0"] and group.not_started == ["h1", "h2"]
    assert "Ctrl-C again is ignored" in capsys.readouterr().err


def test_cli_prints_the_finished_hosts_after_ctrl_c(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    inv = _interrupted_after_h0(tmp_path, monkeypatch, HostResult("h0", "rolled-back", True))
    assert main(["rollback", "--inventory", str(inv)]) == 130
    out = capsys.readouterr()
    assert "h0: rolled-back" in out.out and "not started (interrupted): h1" in out.out
    assert "interrupted" in out.err
    assert main(["rollback", "--inventory", str(inv), "--json"]) == 130
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["not_started"] == ["h1"]
    assert doc["hosts"]["h0"]["status"] == "rolled-back"


def test_probe_prints_the_hosts_probed_before_ctrl_c(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    inv = _interrupted_after_h0(tmp_path, monkeypatch, HostProbe("h0", cpus=4))
    assert main(["probe", "--inventory", str(inv), "--json"]) == 130
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["ok"] is False and doc["not_started"] == ["h1"]
    assert doc["hosts"]["h0"]["cpus"] == 4
    assert "nictune probe: interrupted; not started: h1" in out.err


def test_sigterm_stops_a_rollback_as_ctrl_c_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM (a service manager, `timeout`) ended the process at once: a validation's
    receiver was left at an arm's setting. Now the host under way finishes, nothing more
    starts, and the exit code says SIGTERM (143); the handler is put back afterwards."""
    (tmp_path / "key").write_text(FAKE_KEY)
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {key_file: key}\nhosts:\n  h0: {address: 192.0.2.1}\n"
                   "  h1: {address: 192.0.2.2}\n")

    def one(_args: object, hosts: list[HostInventory], _fn: object) -> GroupResult[Any]:
        def work(host: HostInventory) -> HostResult:
            if host.name == "h0":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.3)
            return HostResult(host.name, "rolled-back", True)
        return run_group(hosts, work, workers=1)

    monkeypatch.setattr(hosts_cli, "_run", one)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["rollback", "--inventory", str(inv)]) == 143
    out = capsys.readouterr()
    assert "h0: rolled-back" in out.out and "not started (interrupted): h1" in out.out
    assert "Traceback" not in out.err
    assert signal.getsignal(signal.SIGTERM) is before


def _interrupted_after_h0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          value: object) -> Path:
    """An inventory of h0 and h1, and a run that Ctrl-C stops after h0 gave `value`."""
    (tmp_path / "key").write_text(FAKE_KEY)
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {key_file: key}\nhosts:\n  h0: {address: 192.0.2.1}\n"
                   "  h1: {address: 192.0.2.2}\n")
    done = GroupResult(outcomes={"h0": HostOutcome("h0", True, value)},
                       not_started=["h1"], interrupted=True)

    def interrupted(*_a: object, **_k: object) -> GroupResult[Any]:
        raise GroupInterrupted(done)

    monkeypatch.setattr(hosts_cli, "run_group", interrupted)
    return inv


def test_a_host_that_never_connected_has_every_result_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/deploy.md's RESULT keys for every host (a refused connection had four)."""
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "key").write_text(FAKE_KEY)
    inv = tmp_path / "inventory.yaml"
    inv.write_text(f"defaults: {{user: root, key_file: {tmp_path / 'key'}, "
                   f"known_hosts: {tmp_path / 'known_hosts'}}}\n"
                   "hosts:\n  h1: {address: 127.0.0.1, port: 1, nics: {nic-1: eth0}}\n")
    assert main(["rollback", "--inventory", str(inv), "--json"]) == 1
    host = json.loads(capsys.readouterr().out)["hosts"]["h1"]
    assert set(host) == {"host", "status", "ok", "error", "restore_verified", "seconds",
                         "changes", "notes"}
    assert host["status"] == "failed" and "cannot connect" in host["error"]


def test_a_hosts_error_prints_on_its_own_line(capsys: pytest.CaptureFixture) -> None:
    """Errors carry host output and names; a newline in one must not print as a forged
    result line of its own (`rx1: applied`)."""
    group: GroupResult[HostResult] = GroupResult({
        "h0": HostOutcome("h0", False, error="cannot connect\nrx1: applied"),
        "h1": HostOutcome("h1", False, HostResult("h1", "failed", False,
                                                   error="ethtool said\nrx1: applied"))})
    hosts_cli._print_results(group, "deploy")
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["h0: FAILED: cannot connect\\nrx1: applied",
                     "h1: failed: ethtool said\\nrx1: applied",
                     "deploy: 0 of 2 hosts ok; failed: h0, h1"]


@pytest.mark.parametrize("text, shown", [
    ("x\x1b[1Erx1: applied", "x\\x1b[1Erx1: applied"),  # a cursor move to the next line
    ("x\x0brx1: applied", "x\\x0brx1: applied"), ("x\x85rx1", "x\\x85rx1"),
    ("x\u2028rx1", "x\\u2028rx1"), ("tab\there", "tab\there")])
def test_one_line_escapes_every_line_breaking_or_control_character(text: str,
                                                                    shown: str) -> None:
    """A review: \\n and \\r alone were escaped; a terminal escape or a vertical tab
    still forged a line."""
    from nictune.errors import one_line

    assert one_line(text) == shown and len(one_line(text).splitlines()) == 1


@pytest.mark.parametrize("argv, key, want", [
    (["rollback", "--inventory", "i.yaml", "--hosts", "rx1", "--hosts", "rx2"], "hosts",
     ["rx1", "rx2"]),
    (["validate", "p.yaml", "--inventory", "i.yaml", "--sender", "s", "--transmissions", "a",
      "--transmissions", "b", "c"], "transmissions", ["a", "b", "c"]),
])
def test_a_list_option_given_twice_takes_both(argv: list[str], key: str,
                                              want: list[str]) -> None:
    """`--hosts rx1 --hosts rx2` deployed to rx2 alone and said "1 of 1 hosts ok"."""
    assert getattr(build_parser().parse_args(argv), key) == want


def test_a_host_whose_output_is_unreadable_makes_the_exit_code_2() -> None:
    """Unreadable remote output is bad input (DESIGN: exit 2), not a failed run (1)."""
    def fails(host: HostInventory) -> str:
        if host.name == "h1":
            raise ProbeError(host.name, "probe output unreadable (3 attempts)")
        raise RunError("ssh: connection refused")

    hosts = [HostInventory(f"h{i}", "192.0.2.1") for i in range(2)]
    group = run_group(hosts, fails)
    assert [group.outcomes[h].exit_code for h in ("h0", "h1")] == [1, 2]
    assert _exit(group) == 2
    assert _exit(run_group(hosts[:1], fails)) == 1


def test_a_change_line_escapes_control_characters_from_the_host() -> None:
    """A host file's \\r printed as is: the terminal moved its cursor over the line."""
    assert hosts_cli._short("min_num_slots=1\rfake") == "min_num_slots=1\\rfake"
