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
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nictune.deploy import transaction as tx
from nictune.deploy.inventory import HostInventory
from nictune.deploy.probe import HostProbe, NicProbe
from nictune.deploy.transaction import (
    HostResult,
    Options,
    Watchdog,
    apply_host,
    snapshot_path,
)
from nictune.deploy.transport import CommandResult, Connection, HostError, command_line
from nictune.model import NicSetting

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
                         nics=nics)


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
