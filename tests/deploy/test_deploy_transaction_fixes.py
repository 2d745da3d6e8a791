"""Transactions without a lab, on a fake host in a temporary directory.

Its probe is built in memory (`FakeHost.probe` stands in for `probe_host`) from a few
fake interfaces; PF_RING's files and the on-host timer are real files under the host's
`root`, and the transaction's commands for them (arm, apply, verify, disarm, restore) run
in a local `sh`. `ShellConn` runs only commands that name that
directory and refuses, before running it, any command that names ethtool, /sys or /proc
(but the timer's own read of /proc/PID/cmdline): nothing can touch this machine's NICs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nictune.deploy import transaction as tx
from nictune.deploy.inventory import HostInventory
from nictune.deploy.probe import HostProbe, NicProbe, ProbeError
from nictune.deploy.transaction import (
    ArmFailed,
    HostResult,
    Options,
    Watchdog,
    apply_host,
    apply_knobs,
    confirm_host,
    read_knobs,
    restore_host,
    snapshot_path,
)
from nictune.deploy.transport import CommandResult, Connection, HostError, command_line
from nictune.model import NicSetting
from nictune.validation import runner

# Already the shape of active_wait on eth1, so deploying it changes only PF_RING's files.
SETTING = NicSetting("active_wait", ring_slots=2048)
FORBIDDEN = re.compile(r"ethtool|/sys/|/proc/(?!\$p/cmdline)")
TIMER = "var/lib/nictune"


@dataclass
class Device:
    bus: str
    coalesce: dict[str, Any]
    rx: int


class ShellConn(Connection):
    """Runs commands in a local sh; only those confined to the host's temporary root."""

    def __init__(self, host: HostInventory):
        super().__init__(host)
        self.commands: list[str] = []

    def connect(self) -> ShellConn:
        return self

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
            sudo: bool | None = None, stdin: bytes | None = None,
            check: bool = False) -> CommandResult:
        line = command_line(cmd)
        text = line + (stdin or b"").decode()
        assert self.host.root != "/" and self.host.root in line, f"not confined: {line!r}"
        assert not FORBIDDEN.search(text), f"would touch this machine: {text!r}"
        self.commands.append(line)
        p = subprocess.run(["sh", "-c", line], input=stdin or b"", capture_output=True,
                           timeout=timeout or 30)
        res = CommandResult(line, p.returncode, p.stdout.decode(), p.stderr.decode(), 0.0)
        if check and not res.ok:
            raise HostError(self.host.name, f"{line[:80]!r} failed: {res.error_line()}")
        return res


class FakeHost:
    """Interfaces (name -> Device) as the probe shows them; files under `root`."""

    def __init__(self, tmp: Path):
        self.tmp, self.root = tmp, tmp / "root"
        self.devices = {
            "eth1": Device("0000:01:00.0", {"rx-usecs": 0, "rx-frames": 1,
                                            "adaptive-rx": False}, 2048),
            "eth2": Device("0000:02:00.0", {"rx-usecs": 8, "rx-frames": 0,
                                            "adaptive-rx": True}, 1024),
        }

    def inventory(self, nics: dict[str, str], address: str = "192.0.2.7") -> HostInventory:
        return HostInventory("rx1", address, nics=nics, root=str(self.root),
                             state_dir=self.tmp / ".nictune")

    def _file(self, path: str) -> str | None:
        f = self.root / path
        return f.read_text() if f.exists() else None

    def probe(self, conn: Connection) -> HostProbe:
        timer = next((s for s in ("armed", "fired") if (self.root / TIMER / s).exists()),
                     "none")
        nics = {}
        for nic, iface in conn.host.nics.items():
            d = self.devices.get(iface)
            nics[nic] = NicProbe(nic, iface, exists=False) if d is None else NicProbe(
                nic, iface, driver="ixgbe", bus_info=d.bus, coalesce=dict(d.coalesce),
                ring={"current": {"rx": d.rx}, "max": {"rx": 4096}},
                napi={"gro_flush_timeout": 0, "napi_defer_hard_irqs": 0},
                capture_profile=self._file(f"etc/nictune/capture/{iface}.json"))
        return HostProbe(conn.host.name, cpus=4, sysctls={"busy_read": 0, "busy_poll": 0},
                         pfring_conf=self._file("etc/pf_ring/pf_ring.conf"), timer=timer,
                         nics=nics, ssh_iface="eth0", mgmt_ifaces=["eth0"])


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHost]:
    """A fake host; afterwards no on-host timer of it is left running."""
    host = FakeHost(tmp_path)
    monkeypatch.setattr(tx, "probe_host", host.probe)
    yield host
    if (host.root / TIMER).exists():
        Watchdog(ShellConn(host.inventory({}))).disarm()


def snapshot(host: HostInventory) -> dict[str, Any]:
    return json.loads(snapshot_path(host.state_dir, host.name).read_text())


def deploy(host: HostInventory, settings: dict[str, NicSetting] | None = None,
           opts: Options | None = None) -> HostResult:
    return apply_host(ShellConn(host), host, settings or {"nic-1": SETTING}, opts)


def cut_short(host: HostInventory, monkeypatch: pytest.MonkeyPatch, at: str,
              opts: Options | None = None, conn: Connection | None = None) -> None:
    """A deploy of SETTING stopped by Ctrl-C at FAULT_HOOKS point `at` ("verify": after
    its apply steps, before its read-back; "disarm": after its read-back)."""
    def stop(_conn: Connection) -> None:
        raise KeyboardInterrupt

    monkeypatch.setitem(tx.FAULT_HOOKS, at, stop)
    with pytest.raises(KeyboardInterrupt):
        tx.apply_host(conn or ShellConn(host), host, {"nic-1": SETTING}, opts)
    monkeypatch.delitem(tx.FAULT_HOOKS, at)


def wait_for(path: Path, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def arm_failing_timer(host: HostInventory, seconds: float = 1.0) -> str:
    """Arm a timer whose restore script fails as ethtool does; wait until it ran."""
    token = "f" * 32
    Watchdog(ShellConn(host)).arm(["echo 'netlink error: Invalid argument' >&2; false"],
                                  seconds, token)
    wait_for(Path(host.root) / TIMER / "restore.rc")
    return token


# ----------------------------------------------------------------- the snapshot's NIC mapping


def test_deploy_records_each_nics_interface_and_bus(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    result = deploy(host)
    assert (result.status, result.ok) == ("applied", True), result.error
    doc = snapshot(host)
    assert doc["nictune_snapshot"] == 2 and doc["address"] == "192.0.2.7"
    assert doc["nics"] == {"nic-1": {"iface": "eth1", "bus_info": "0000:01:00.0"}}
    wider = fake.inventory({"nic-1": "eth1", "nic-2": "eth2"})
    assert deploy(wider).ok
    assert snapshot(host)["nics"]["nic-2"] == {"iface": "eth2", "bus_info": "0000:02:00.0"}
    assert snapshot(host)["taken"] == doc["taken"]  # the original snapshot, extended


def test_rollback_and_deploy_refuse_a_nic_that_now_names_another_interface(
        fake: FakeHost) -> None:
    assert deploy(fake.inventory({"nic-1": "eth1"})).ok
    moved = fake.inventory({"nic-1": "eth2"})  # the operator "corrects" the inventory
    before = snapshot(moved)
    for run in (restore_host, lambda c, h: apply_host(c, h, {"nic-1": SETTING})):
        conn = ShellConn(moved)
        result = run(conn, moved)
        assert (result.status, result.ok) == ("refused", False)
        assert "nic-1" in result.error and "eth1" in result.error and "eth2" in result.error
        assert conn.commands == []  # nothing ran on the host
    assert snapshot(moved) == before  # kept (not archived), so it can still be used
    back = fake.inventory({"nic-1": "eth1"})  # the fix the message suggests
    result = restore_host(ShellConn(back), back)
    assert result.status == "rolled-back", result.error
    assert not (fake.root / "etc/nictune/capture/eth1.json").exists()


def test_same_name_on_another_bus_address_is_refused(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host).ok
    fake.devices["eth1"].bus, fake.devices["eth2"].bus = "0000:02:00.0", "0000:01:00.0"
    result = restore_host(ShellConn(host), host)  # udev swapped the names
    assert result.status == "refused"
    assert "0000:02:00.0" in result.error and "0000:01:00.0" in result.error


def test_an_interface_under_a_new_nic_id_is_refused(fake: FakeHost) -> None:
    assert deploy(fake.inventory({"nic-1": "eth1"})).ok
    renamed = fake.inventory({"uplink": "eth1"})
    result = apply_host(ShellConn(renamed), renamed, {"uplink": SETTING})
    assert result.status == "refused" and "under the NIC id nic-1" in result.error


def test_another_address_is_refused(fake: FakeHost) -> None:
    assert deploy(fake.inventory({"nic-1": "eth1"})).ok
    elsewhere = fake.inventory({"nic-1": "eth1"}, address="192.0.2.99")
    result = restore_host(ShellConn(elsewhere), elsewhere)
    assert result.status == "refused"
    assert "192.0.2.7" in result.error and "192.0.2.99" in result.error


def test_rollback_refuses_a_nic_dropped_from_the_inventory(fake: FakeHost) -> None:
    fake.devices["eth2"].coalesce, fake.devices["eth2"].rx = fake.devices["eth1"].coalesce, 2048
    assert deploy(fake.inventory({"nic-1": "eth1", "nic-2": "eth2"}),
                  {"nic-1": SETTING, "nic-2": SETTING}).ok
    fewer = fake.inventory({"nic-1": "eth1"})
    result = restore_host(ShellConn(fewer), fewer)
    assert result.status == "refused" and "add `nic-2: eth2`" in result.error
    assert deploy(fewer).ok  # a deploy keeps nic-2's originals: nothing to refuse


def test_a_snapshot_without_mapping_still_loads_and_says_so(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    doc = {"nictune_snapshot": 1, "host": "rx1", "address": "192.0.2.7", "taken": "t",
           "knobs": read_knobs(fake.probe(ShellConn(host)))}
    snapshot_path(host.state_dir, "rx1").parent.mkdir(parents=True)
    snapshot_path(host.state_dir, "rx1").write_text(json.dumps(doc))
    result = restore_host(ShellConn(host), host, Options(dry_run=True))
    assert result.status == "dry-run"
    assert any(n.nic == "nic-1" and "unknown" in n.detail for n in result.notes)
    assert deploy(fake.inventory({"nic-1": "eth1", "nic-2": "eth2"})).ok
    assert list(snapshot(host)["nics"]) == ["nic-2"]  # nic-1's is never guessed afterwards


def test_a_corrupt_mapping_is_refused(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host).ok
    path = snapshot_path(host.state_dir, "rx1")
    path.write_text(json.dumps({**snapshot(host), "nics": {"nic-1": "eth1"}}))
    with pytest.raises(HostError, match="corrupt"):
        restore_host(ShellConn(host), host)


@pytest.mark.parametrize("change", [
    lambda d: {},  # (was "rolled-back", archived, and the host left tuned)
    lambda d: {**d, "knobs": {}},
    lambda d: {k: v for k, v in d.items() if k != "nictune_snapshot"},
    lambda d: {**d, "nictune_snapshot": 9},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/napi/gro_flush_timeout": [1]}},
    lambda d: {**d, "knobs": {**d["knobs"], "rm -rf": "1"}},
    # values no host gives: each failed the rollback at its command (the host stayed
    # tuned); now refused before any knob is touched
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/ring/rx": "abc"}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/ring/rx": True}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/irq/98": "1,,2"}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/irq/98": ""}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/rps/rx-0": "f"}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/coalesce/adaptive-rx": 1}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/features/tso": True}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/pfring/profile": 5}},
    lambda d: {**d, "knobs": {**d["knobs"], "host/sysctl/busy_read": 1.5}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/bogus/x": 1}},
    # (from a review: past what ethtool holds, the other kind of the backend's key, the
    # wrong scope)
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/ring/rx": 2**40}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/coalesce/rx-usecs": 2**32}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/irq/rx-0": 5}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/rps/5": "0-3"}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/rps/rx-abc": 3}},
    lambda d: {**d, "knobs": {**d["knobs"], "host/ring/rx": 512}},
    lambda d: {**d, "knobs": {**d["knobs"], "host/pfring/profile": "x"}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/pfring/conf": "x"}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/sysctl/busy_read": 0}},
    # (from a review: values the kernel refuses, so the rollback failed at its write)
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/napi/gro_flush_timeout": 10**30}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/napi/gro_flush_timeout": -1}},
    lambda d: {**d, "knobs": {**d["knobs"], "nic/nic-1/napi/napi_defer_hard_irqs": 2**31}},
    lambda d: {**d, "knobs": {**d["knobs"], "host/sysctl/busy_poll": -5}},
    lambda d: {**d, "nictune_snapshot": True},  # (true == 1 in Python)
])
def test_a_snapshot_that_is_not_one_is_refused(fake: FakeHost, change: Any) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host).ok
    path = snapshot_path(host.state_dir, "rx1")
    path.write_text(json.dumps(change(snapshot(host))))
    with pytest.raises(HostError, match="corrupt"):
        restore_host(ShellConn(host), host)
    assert path.exists()  # kept for a person to look at, not archived


def test_a_rollback_that_cannot_read_a_knob_of_a_nic_still_there_changes_nothing(
        fake: FakeHost) -> None:
    """A knob the snapshot holds that the host no longer reports although its NIC is still
    there (a coalescing read that failed): the rollback restored the rest, archived the
    snapshot and left that one tuned. Now it changes nothing and keeps the snapshot."""
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host).ok
    before = snapshot(host)
    fake.devices["eth1"].coalesce.pop("rx-usecs")
    result = restore_host(ShellConn(host), host)
    assert result.status == "refused" and "nic/nic-1/coalesce/rx-usecs" in result.error
    assert snapshot(host) == before  # kept, not archived


def test_a_deploy_whose_probe_sees_another_deploys_changes_keeps_its_snapshot(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deploys at once: the second read "no snapshot", then probed the host after the
    first had finished, and saved the first's tuned values as the original — rollback
    then restored nothing. The snapshot is read after the probe now."""
    host = fake.inventory({"nic-1": "eth1"})
    other = {"ran": False}

    def probe_after_another_deploy(conn: Connection) -> HostProbe:
        if not other["ran"]:
            other["ran"] = True
            monkeypatch.setattr(tx, "probe_host", fake.probe)
            assert deploy(host).ok  # the other run, start to end
            monkeypatch.setattr(tx, "probe_host", probe_after_another_deploy)
        return fake.probe(conn)

    monkeypatch.setattr(tx, "probe_host", probe_after_another_deploy)
    assert deploy(host).ok
    assert snapshot(host)["knobs"]["nic/nic-1/pfring/profile"] is None  # no file before


def test_a_first_deploy_that_undid_itself_leaves_its_snapshot_archived(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first deploy's read-back fails, its change is undone and verified: the snapshot
    it took stayed and stood for "the original" at the next deploy, over what the host
    had by then (a review's case: the admin's later pf_ring.conf lost a key, and a
    rollback deleted it). A deploy that had a snapshot before keeps it."""
    host = fake.inventory({"nic-1": "eth1"})

    def unreadable_once(conn: Connection) -> HostProbe:
        monkeypatch.setattr(tx, "probe_host", fake.probe)
        raise ProbeError(conn.host.name, "read-back unreadable")

    def break_read_back(_conn: Connection) -> None:
        monkeypatch.setattr(tx, "probe_host", unreadable_once)

    monkeypatch.setitem(tx.FAULT_HOOKS, "verify", break_read_back)
    result = deploy(host)
    assert (result.status, result.restore_verified) == ("restored", True)
    assert not snapshot_path(host.state_dir, host.name).exists()
    assert list(host.state_dir.glob("snapshots/rx1.restored-*.json"))
    monkeypatch.delitem(tx.FAULT_HOOKS, "verify")
    assert deploy(host).ok
    before = snapshot(host)
    monkeypatch.setitem(tx.FAULT_HOOKS, "verify", break_read_back)
    assert deploy(host, {"nic-1": replace(SETTING, watermark=4)}).status == "restored"
    assert snapshot(host) == before


def test_a_first_deploy_the_management_guard_refuses_saves_no_snapshot(
        fake: FakeHost) -> None:
    """A ring change on the interface the SSH session uses is refused, nothing changes:
    the snapshot it wrote stood for "the original" at the next deploy (a review's case)."""
    fake.devices["eth0"] = Device("0000:00:19.0", {"rx-usecs": 0, "rx-frames": 1,
                                                   "adaptive-rx": False}, 2048)
    host = fake.inventory({"nic-1": "eth0"})
    result = deploy(host, {"nic-1": replace(SETTING, ring_slots=1024)})
    assert result.status == "refused" and "allow-mgmt-iface" in result.error
    assert not snapshot_path(host.state_dir, host.name).exists()


def test_a_snapshot_nested_past_python_s_limit_is_corrupt_not_a_recursion_error(
        fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    path = snapshot_path(host.state_dir, "rx1")
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(HostError, match="corrupt"):
        restore_host(ShellConn(host), host)


def test_pf_ring_conf_keeps_its_mode_through_deploy_and_rollback(fake: FakeHost) -> None:
    """Written through a new temp file, a 0640 pf_ring.conf came back 0644 (a review's
    case): the temp file starts as a copy of the old one now."""
    host = fake.inventory({"nic-1": "eth1"})
    conf = fake.root / "etc/pf_ring/pf_ring.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("min_num_slots=1024 enable_tx_capture=0\n")
    conf.chmod(0o640)
    assert deploy(host).ok
    assert "min_num_slots=2048" in conf.read_text() and conf.stat().st_mode & 0o777 == 0o640
    assert restore_host(ShellConn(host), host).status == "rolled-back"
    assert [p.name.split("-2")[0] for p in host.state_dir.glob("snapshots/*")] == [
        "rx1.rolled-back"]  # (not "restored": that is a deploy that undid itself)
    assert conf.read_text() == "min_num_slots=1024 enable_tx_capture=0\n"
    assert conf.stat().st_mode & 0o777 == 0o640


# ----------------------------------------------------------------- dry run


def test_dry_run_plans_a_nic_the_snapshot_lacks_like_a_deploy(fake: FakeHost) -> None:
    assert deploy(fake.inventory({"nic-1": "eth1"})).ok
    wider = fake.inventory({"nic-1": "eth1", "nic-2": "eth2"})
    before = snapshot(wider)
    both = {"nic-1": SETTING, "nic-2": SETTING}
    dry = deploy(wider, both, Options(dry_run=True))
    assert dry.status == "dry-run"
    assert snapshot(wider) == before  # a dry run writes nothing
    # what a deploy would plan: here nothing was changed yet, so the same as on a host
    # nictune never saw
    fresh = deploy(replace(wider, state_dir=fake.tmp / "fresh"), both, Options(dry_run=True))
    assert [c.to_json() for c in dry.changes] == [c.to_json() for c in fresh.changes]
    assert dry.notes == fresh.notes  # (no "rx-usecs is n/a on eth2")
    assert "nic/nic-2/coalesce/rx-usecs" in {c.knob for c in dry.changes}


# ----------------------------------------------------------------- the on-host timer


def test_confirm_after_the_timer_restored(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host, opts=Options(confirm_timeout=1)).status == "pending-confirm"
    wait_for(fake.root / TIMER / "restore.rc")
    result = confirm_host(ShellConn(host), host)
    assert (result.status, result.ok) == ("restored", False)
    assert not (fake.root / "etc/nictune/capture/eth1.json").exists()


def test_confirm_reports_a_timer_restore_that_failed(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    arm_failing_timer(host)
    result = confirm_host(ShellConn(host), host)
    assert (result.status, result.ok, result.restore_verified) == ("failed", False, False)
    assert "exit code 1" in result.error and "netlink error" in result.error
    assert "nictune rollback" in result.error
    audit = [json.loads(x) for x in (host.state_dir / "audit.jsonl").read_text().splitlines()]
    assert [(a["action"], a["ok"]) for a in audit] == [("timer-restore", False)]
    assert confirm_host(ShellConn(host), host).status == "unchanged"  # reported once


def test_the_next_deploy_notes_a_timer_restore_that_failed(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    arm_failing_timer(host)
    result = deploy(host)
    assert result.ok, result.error
    warned = [n.detail for n in result.notes if n.backend == "timer"]
    assert len(warned) == 1 and "FAILED" in warned[0] and "exit code 1" in warned[0]
    assert not [n for n in deploy(host).notes if n.backend == "timer"]


def test_disarm_leaves_another_arming_alone(fake: FakeHost) -> None:
    host = fake.inventory({})
    wd, mine, other = Watchdog(ShellConn(host)), "a" * 32, "b" * 32
    wd.arm(["true"], 60, mine)
    pid = int((fake.root / TIMER / "watchdog.pid").read_text())
    assert wd.disarm(other) == "none"
    assert (fake.root / TIMER / "armed").read_text().strip() == mine
    assert wd.disarm(mine) == "disarmed"
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, "the timer still runs after its disarm"
        time.sleep(0.05)


def test_a_second_arming_neither_replaces_the_first_nor_changes_anything(
        fake: FakeHost) -> None:
    """Two runs that passed the probe at once: the second's arm finds `armed` taken and
    fails before writing its restore script or running its steps."""
    host = fake.inventory({})
    wd, first, second = Watchdog(ShellConn(host)), "a" * 32, "b" * 32
    wd.arm(["echo first"], 60, first)
    script = (fake.root / TIMER / "restore.sh").read_text()
    marker = fake.root / "second-ran"
    with pytest.raises(ArmFailed, match="another run armed this host's restore timer first"):
        wd.arm(["echo second"], 60, second, then=f"touch {marker}")
    assert (fake.root / TIMER / "restore.sh").read_text() == script and not marker.exists()
    assert (fake.root / TIMER / "armed").read_text().strip() == first
    assert wd.disarm(first) == "disarmed"
    wd.arm(["echo second"], 60, second)  # free again once the first is disarmed
    assert wd.disarm(second) == "disarmed"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # (a zombie has exited)
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_disarm_says_fired_only_for_its_own_arming(fake: FakeHost) -> None:
    host = fake.inventory({})
    token = arm_failing_timer(host)
    wd = Watchdog(ShellConn(host))
    assert wd.disarm("c" * 32) == "none"
    assert wd.disarm(token) == "fired"


def test_apply_knobs_refuses_while_a_deploy_awaits_confirmation(fake: FakeHost) -> None:
    host = fake.inventory({"nic-1": "eth1"})
    saved = read_knobs(fake.probe(ShellConn(host)))
    pending = deploy(host, opts=Options(confirm_timeout=60))
    assert pending.status == "pending-confirm"
    script = (fake.root / TIMER / "restore.sh").read_text()
    result = apply_knobs(ShellConn(host), host, saved)
    assert (result.status, result.ok) == ("refused", False)
    assert "awaits confirmation" in result.error
    assert (fake.root / TIMER / "armed").read_text().strip() == pending.token
    assert (fake.root / TIMER / "restore.sh").read_text() == script  # its guard intact


def test_a_deploy_cut_short_before_its_verify_is_neither_confirmed_nor_rolled_back_under(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --confirm-timeout deploy stopped after its apply steps, before the read-back (or
    still applying): `deploy --confirm` kept that half-applied host and disarmed its timer,
    and a rollback disarmed it, restored from a probe taken before the apply landed and
    archived the snapshot. Both now refuse and leave the timer armed to restore the host;
    another deploy is refused too. Once verified, the deploy awaits confirmation."""
    host = fake.inventory({"nic-1": "eth1"})
    cut_short(host, monkeypatch, "verify", Options(confirm_timeout=60))
    armed = (fake.root / TIMER / "armed").read_text()
    confirmed = confirm_host(ShellConn(host), host)
    assert (confirmed.status, confirmed.ok) == ("failed", False)
    assert "never verified" in confirmed.error
    rolled = restore_host(ShellConn(host), host)
    assert rolled.status == "refused" and "applying its change" in rolled.error
    assert snapshot_path(host.state_dir, host.name).exists()
    again = deploy(host)
    assert again.status == "refused" and "applying its change" in again.error
    assert (fake.root / TIMER / "armed").read_text() == armed  # the guard intact
    Watchdog(ShellConn(host)).disarm()
    assert restore_host(ShellConn(host), host).status == "rolled-back"
    pending = deploy(host, opts=Options(confirm_timeout=60))
    assert pending.status == "pending-confirm"
    assert not (fake.root / TIMER / "applying").exists()  # verified: awaits confirmation
    assert confirm_host(ShellConn(host), host).status == "confirmed"


def test_an_arming_cut_short_whose_timer_is_gone_is_rolled_back_not_confirmed(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut short, then the host rebooted (the timer gone): `--confirm`, rollback and
    deploy were all refused for ever ("its timer restores the host"). Rollback now
    restores from the snapshot; confirm and deploy say to run it."""
    host = fake.inventory({"nic-1": "eth1"})
    cut_short(host, monkeypatch, "verify", Options(confirm_timeout=60))
    pid = int((fake.root / TIMER / "watchdog.pid").read_text())
    os.killpg(os.getpgid(pid), 9)
    time.sleep(0.2)
    confirmed = confirm_host(ShellConn(host), host)
    assert confirmed.status == "failed" and "timer is gone" in confirmed.error
    again = deploy(host)
    assert again.status == "refused" and "nictune rollback" in again.error
    assert restore_host(ShellConn(host), host).status == "rolled-back"
    assert not (fake.root / "etc/nictune/capture/eth1.json").exists()


def test_an_arming_of_a_nictune_without_the_marker_still_awaits_confirmation(
        fake: FakeHost) -> None:
    """A --confirm-timeout deploy by the previous version (no `applying` marker) is
    confirmed as before, not taken for one cut short."""
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host, opts=Options(confirm_timeout=3600)).status == "pending-confirm"
    assert confirm_host(ShellConn(host), host).status == "confirmed"


def test_a_refused_rollback_leaves_a_pending_timer_armed(fake: FakeHost) -> None:
    """Refused for a knob it cannot read, the rollback had already disarmed the pending
    --confirm-timeout deploy's timer: nothing would restore the host."""
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host, opts=Options(confirm_timeout=3600)).status == "pending-confirm"
    fake.devices["eth1"].coalesce.pop("rx-usecs")
    assert restore_host(ShellConn(host), host).status == "refused"
    assert (fake.root / TIMER / "armed").exists()


def test_a_timer_that_fires_while_a_deploy_reads_the_host_refuses_it(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe saw the timer armed; it fired before the deploy looked closer: the deploy
    went on from what the probe read before the restore (a review's race), and the
    fired restore was never collected."""
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host, opts=Options(confirm_timeout=3600)).status == "pending-confirm"
    real = Watchdog.arming

    def fire_first(self: Watchdog) -> str:
        assert Watchdog(self.conn).restore_now()
        (fake.root / TIMER / "armed").replace(fake.root / TIMER / "fired")
        (fake.root / TIMER / "restore.rc").write_text("0\n")
        return real(self)

    monkeypatch.setattr(Watchdog, "arming", fire_first)
    result = deploy(host, {"nic-1": replace(SETTING, watermark=4)})
    assert result.status == "refused" and "run it again" in result.error
    assert not (fake.root / TIMER / "fired").exists()  # collected




# ----------------------------------------------------------------- validation's put-back


def test_a_validation_arm_cut_short_is_superseded_by_the_put_back(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with a deployment before validation; Ctrl-C between an arm's verify and its
    disarm leaves that arm's timer armed: the put-back supersedes it and restores the
    pre-validation values (it was refused as 'an earlier deploy awaits confirmation')."""
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host).ok
    profile = fake.root / "etc/nictune/capture/eth1.json"
    profile.unlink()  # the pre-validation state differs from the arm's
    conn = ShellConn(host)
    start = fake.probe(conn)
    h = runner._Host(conn, host, True, read_knobs(start), start.timer)
    cut_short(host, monkeypatch, "disarm", conn=conn)
    assert (fake.root / TIMER / "armed").exists() and profile.exists()
    result = runner._put_back(h)
    assert (result.status, result.ok) == ("applied", True), result.error
    assert not profile.exists() and read_knobs(fake.probe(conn)) == h.before


def test_a_first_validation_arm_cut_short_is_rolled_back_by_the_put_back(
        fake: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """No deployment before validation; Ctrl-C after an arm's verify, before its disarm:
    the put-back's rollback was refused as "another deploy is applying" (a review's case
    against the verified marker). Its own arm is superseded."""
    host = fake.inventory({"nic-1": "eth1"})
    conn = ShellConn(host)
    h = runner._Host(conn, host, False, {}, fake.probe(conn).timer)
    cut_short(host, monkeypatch, "disarm", conn=conn)
    assert (fake.root / TIMER / "armed").exists()
    assert runner._put_back(h).status == "rolled-back"
    assert not (fake.root / TIMER / "armed").exists()
    assert not (fake.root / "etc/nictune/capture/eth1.json").exists()


def test_an_operators_pending_deploy_is_neither_refused_nor_superseded_by_validation(
        fake: FakeHost) -> None:
    """The operator's --confirm-timeout deploy is pending: validation's arm is refused, so
    nothing changed, and the put-back reports the host unchanged (not 'could not restore')
    and leaves the operator's timer armed."""
    host = fake.inventory({"nic-1": "eth1"})
    assert deploy(host, opts=Options(confirm_timeout=60)).status == "pending-confirm"
    conn = ShellConn(host)
    start = fake.probe(conn)
    h = runner._Host(conn, host, True, read_knobs(start), start.timer)
    assert tx.apply_host(conn, host, {"nic-1": replace(SETTING, ring_slots=1024)}).status \
        == "refused"
    result = runner._put_back(h)
    assert (result.status, result.ok) == ("unchanged", True)
    assert (fake.root / TIMER / "armed").exists()
