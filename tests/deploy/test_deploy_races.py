"""The races the fault benchmark found, each injected at a precise point (root only):
the session dying before/after the disarm reached the host, an ethtool whose output is
empty, a stale timer PID that now names another process.

Test hooks (`transaction.FAULT_HOOKS`) run just before a named step, so the fault lands
between two known steps instead of at a random moment.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nictune.deploy import probe as probe_mod
from nictune.deploy import transaction as tx
from nictune.deploy.inventory import HostInventory, load_inventory
from nictune.deploy.lab import Lab
from nictune.deploy.probe import ProbeError, parse_probe, probe_host
from nictune.deploy.transaction import Options, apply_host, resolve_host, restore_host
from nictune.deploy.transport import Connection
from nictune.model import NicSetting

pytestmark = pytest.mark.netns

SETTING = NicSetting("passive_wait", ring_slots=4096, poll_interval=0.0003, irq_core=1)
GUARD = 2.0


def napi(lab: Lab, host: str) -> str:
    """gro_flush_timeout as the kernel shows it (not via nictune)."""
    return lab.exec(host, ["cat", "/sys/class/net/veth0/gro_flush_timeout"]).stdout.strip()


def timer_dir(lab: Lab, host: str) -> Path:
    return Path(lab.host(host).root) / "var/lib/nictune"


@pytest.fixture
def rx1(lab: Lab) -> Iterator[HostInventory]:
    """rx1's inventory entry; afterwards sshd runs again, no hook is left and rx1 is rolled
    back to where it started."""
    before = napi(lab, "rx1")
    host = load_inventory(lab.inventory).hosts["rx1"]
    yield host
    tx.FAULT_HOOKS.clear()
    if not lab.host("rx1").sshd_pid:
        lab.start_sshd("rx1")
    with Connection(host) as conn:
        restore_host(conn, host, Options(guard_timeout=GUARD))
    assert napi(lab, "rx1") == before


def wait_timer_done(lab: Lab, host: str, limit: float = 15.0) -> None:
    d, deadline = timer_dir(lab, host), time.monotonic() + limit
    while (d / "armed").exists() or ((d / "fired").exists() and not (d / "restore.rc").exists()):
        assert time.monotonic() < deadline, "the on-host timer did not finish"
        time.sleep(0.05)


def test_session_lost_before_disarm_reaches_host(lab: Lab, rx1: HostInventory) -> None:
    before = napi(lab, "rx1")
    tx.FAULT_HOOKS["disarm"] = lambda conn: lab.kill_sshd("rx1")
    with Connection(rx1) as conn:
        result = apply_host(conn, rx1, {"rx1-veth0": SETTING}, Options(guard_timeout=GUARD))
    assert (result.status, result.ok) == ("unknown", False), result.error
    assert "fully applied if the disarm reached it" in result.error
    wait_timer_done(lab, "rx1")
    assert napi(lab, "rx1") == before  # the disarm never arrived: the timer restored
    lab.start_sshd("rx1")
    with Connection(rx1) as conn:
        settled = resolve_host(conn, result)
    assert (settled.status, settled.ok, settled.restore_verified) == ("restored", False, True)


def test_session_lost_after_disarm_reached_host(lab: Lab, rx1: HostInventory) -> None:
    before = napi(lab, "rx1")

    def disarm_then_die(conn: Connection) -> None:
        tx.Watchdog(conn).disarm()  # the disarm reaches the host ...
        lab.kill_sshd("rx1")  # ... and the session dies before its answer

    tx.FAULT_HOOKS["disarm"] = disarm_then_die
    with Connection(rx1) as conn:
        result = apply_host(conn, rx1, {"rx1-veth0": SETTING}, Options(guard_timeout=GUARD))
    assert (result.status, result.ok) == ("unknown", False), result.error
    wait_timer_done(lab, "rx1")
    applied = napi(lab, "rx1")
    assert applied != before  # disarmed: the timer did not restore; nothing half-done
    lab.start_sshd("rx1")
    with Connection(rx1) as conn:
        settled = resolve_host(conn, result)
    assert (settled.status, settled.ok) == ("applied", True)
    assert any(n.kind == "session-lost" for n in settled.notes)
    assert napi(lab, "rx1") == applied


def test_session_lost_before_verify_is_restored_by_timer(lab: Lab, rx1: HostInventory) -> None:
    before = napi(lab, "rx1")
    tx.FAULT_HOOKS["verify"] = lambda conn: lab.kill_sshd("rx1")
    with Connection(rx1) as conn:
        result = apply_host(conn, rx1, {"rx1-veth0": SETTING}, Options(guard_timeout=GUARD))
    assert (result.status, result.ok) == ("failed", False)
    assert "timer restores" in result.error
    wait_timer_done(lab, "rx1")
    assert napi(lab, "rx1") == before


def test_empty_ethtool_output_is_never_taken_for_state(lab: Lab) -> None:
    host = load_inventory(lab.inventory).hosts["rx1"]
    with Connection(host) as conn:
        text = conn.run(probe_mod._script(host)).stdout
    cut = text.split("@@section json-k rx1-veth0\n")[0] + "@@section json-k rx1-veth0\n"
    with pytest.raises(Exception, match="printed nothing"):
        parse_probe(host, cut)

    class Truncating(Connection):
        def run(self, cmd, **kw):  # type: ignore[no-untyped-def,override]
            res = super().run(cmd, **kw)
            return type(res)(res.cmd, res.rc, res.stdout[: len(res.stdout) // 2], res.stderr,
                             res.seconds)

    with Truncating(host) as conn, pytest.raises(ProbeError, match="incomplete"):
        probe_host(conn)


def test_garbled_read_back_is_restored_over_the_live_session(lab: Lab,
                                                              rx1: HostInventory) -> None:
    """The read-back after the apply comes back garbled (one line of it: a fuzz run's
    `rps.rx-0=n/a`): the host is not verified, so it is restored over the live session and
    that restore verified — the parsers' ValueError used to escape the transaction,
    leaving the plan applied until the on-host timer fired."""
    before = napi(lab, "rx1")

    class Garbling(Connection):
        garble = 0

        def run(self, cmd, **kw):  # type: ignore[no-untyped-def,override]
            res = super().run(cmd, **kw)
            if self.garble and "@@section host" in cmd:
                self.garble -= 1
                out = re.sub(r"rps\.rx-0=\S*", "rps.rx-0=n/a", res.stdout)
                return type(res)(res.cmd, res.rc, out, res.stderr, res.seconds)
            return res

    def garble(conn: Garbling) -> None:
        conn.garble = probe_mod.PROBE_ATTEMPTS  # every attempt of the read-back's probe

    tx.FAULT_HOOKS["verify"] = garble
    with Garbling(rx1) as conn:
        result = apply_host(conn, rx1, {"rx1-veth0": SETTING}, Options(guard_timeout=GUARD))
    assert (result.status, result.ok, result.restore_verified) == ("restored", False, True)
    assert "not a CPU mask" in result.error
    assert napi(lab, "rx1") == before


def test_disarm_never_kills_a_reused_timer_pid(lab: Lab, rx1: HostInventory) -> None:
    bystander = subprocess.Popen(["sleep", "30"])
    tx.FAULT_HOOKS["disarm"] = lambda conn: (timer_dir(lab, "rx1") / "watchdog.pid") \
        .write_text(f"{bystander.pid}\n")  # the timer's PID was reused by another process
    try:
        with Connection(rx1) as conn:
            result = apply_host(conn, rx1, {"rx1-veth0": SETTING},
                                Options(guard_timeout=GUARD))
        assert result.ok and result.status == "applied", result.error
        assert bystander.poll() is None  # not ours: left alone
    finally:
        bystander.kill()
        bystander.wait()
    wait_timer_done(lab, "rx1")
    assert (timer_dir(lab, "rx1") / "disarmed").exists()
