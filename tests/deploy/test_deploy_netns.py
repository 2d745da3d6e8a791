"""Integration tests on a real lab: network namespaces, veth, sshd, ethtool (root only).

Every test reads the host back independently of nictune (`ip netns exec` + cat/ethtool)
and leaves the lab as it found it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml

from nictune.cli import main
from nictune.deploy import lab as lab_module
from nictune.deploy.inventory import load_inventory
from nictune.deploy.lab import Lab, lab_hosts, process_alive
from nictune.deploy.transaction import Options, apply_host, snapshot_path
from nictune.deploy.transport import CommandTimeout, Connection, HostError
from nictune.errors import RunError
from nictune.model import NicSetting, load_config

pytestmark = pytest.mark.netns

RX1 = NicSetting("passive_wait", ring_slots=4096, poll_interval=0.0002, irq_core=1)
RX2 = NicSetting("watermark", ring_slots=2048, watermark=64, watermark_timeout=0.0015)


def state(lab: Lab, host: str) -> dict[str, Any]:
    """The host's knobs as the kernel and filesystem show them (not via nictune)."""
    sysfs = "/sys/class/net/veth0"
    out = lab.exec(host, ["sh", "-c", f"cat {sysfs}/gro_flush_timeout "
                          f"{sysfs}/napi_defer_hard_irqs {sysfs}/queues/rx-0/rps_cpus; "
                          "ethtool -k veth0 | grep '^generic-receive-offload'; "
                          "ethtool -l veth0 | tail -n 4 | head -n 1"]).stdout.split("\n")
    root = Path(lab.host(host).root)
    files = {}
    for rel in ("etc/pf_ring/pf_ring.conf", "etc/nictune/capture/veth0.json"):
        p = root / rel
        files[rel] = p.read_text() if p.exists() else None
    return {"gro_flush_timeout": int(out[0]), "napi_defer_hard_irqs": int(out[1]),
            "rps": int(out[2], 16), "gro": out[3].split(":")[1].strip(),
            "channels": out[4].split()[-1], **files}


def cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def pristine(lab: Lab) -> dict[str, dict[str, Any]]:
    """The lab receivers' state before a test; asserts the test left it that way."""
    before = {h: state(lab, h) for h in ("rx1", "rx2")}
    yield before
    for host in ("rx1", "rx2"):
        assert state(lab, host) == before[host], f"{host} was left changed"


def test_lab_layout(lab: Lab) -> None:
    inv = load_inventory(lab.inventory)
    assert list(inv.hosts) == ["sender", "rx1", "rx2"]
    config = load_config(lab.config)
    assert set(config.hosts) <= set(inv.hosts)
    for nic_id, nic in config.nics.items():
        assert nic_id in inv.hosts[nic.host].nics
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for h in lab.hosts:
        assert h.netns in names and Path(f"/proc/{h.sshd_pid}").exists()
    assert len(lab.known_hosts.read_text().splitlines()) == 3
    link = lab.link("rx2")
    if shutil.which("hping3"):  # one ICMP echo crosses the sender -> rx2 veth
        reply = lab.exec("sender", ["hping3", "--icmp", "-c", "1", link.receiver_address],
                         check=False)
        assert "1 packets received" in reply.stdout + reply.stderr


def test_probe(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli("probe", "--inventory", str(lab.inventory), capsys=capsys)
    assert code == 0 and out["ok"]
    rx1 = out["hosts"]["rx1"]
    assert rx1["ssh_iface"] == "mgmt0" and rx1["sysctls"] == {"busy_read": None,
                                                              "busy_poll": None}
    nic = rx1["nics"]["rx1-veth0"]
    assert nic["driver"] == "veth" and nic["coalesce"] is None and nic["ring"] is None
    assert "Operation not supported" in nic["errors"]["c"]
    assert nic["channels"]["current"]["rx"] == 1 and nic["irqs"] == {}


def test_deploy_readback_redeploy_rollback(lab: Lab, tmp_path: Path, pristine: dict,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    inv = str(lab.inventory)
    plan = str(lab.write_plan(tmp_path / "plan.yaml", {"rx1": RX1, "rx2": RX2}))
    code, out = cli("deploy", plan, "--inventory", inv, "--dry-run", capsys=capsys)
    assert code == 0 and out["hosts"]["rx1"]["status"] == "dry-run"
    assert out["hosts"]["rx1"]["changes"]
    assert {h: state(lab, h) for h in pristine} == pristine  # dry run touched nothing
    assert not snapshot_path(lab.dir / ".nictune", "rx1").exists()

    code, out = cli("deploy", plan, "--inventory", inv, capsys=capsys)
    assert code == 0 and out["succeeded"] == ["rx1", "rx2"]
    for host in ("rx1", "rx2"):  # hosts run in parallel threads: each knob changed once
        knobs = [c["knob"] for c in out["hosts"][host]["changes"]]
        assert knobs and len(knobs) == len(set(knobs))
    rx1, rx2 = state(lab, "rx1"), state(lab, "rx2")
    assert (rx1["gro_flush_timeout"], rx1["napi_defer_hard_irqs"], rx1["rps"], rx1["gro"]) \
        == (200000, 2, 0b10, "on")
    profile = json.loads(rx1["etc/nictune/capture/veth0.json"])
    assert (profile["mode"], profile["watermark"], profile["ring_slots"]) == (
        "passive_wait", 2048, 4096)
    assert json.loads(rx2["etc/nictune/capture/veth0.json"])["watermark"] == 64
    assert rx2["etc/pf_ring/pf_ring.conf"] == "min_num_slots=2048\n"
    notes = {(n["backend"], n["kind"]) for n in out["hosts"]["rx1"]["notes"]}
    assert {("coalesce", "unsupported"), ("ring", "unsupported"),
            ("pfring", "unavailable")} <= notes
    snap = snapshot_path(lab.dir / ".nictune", "rx1")
    original = snap.read_text()

    audit = lab.dir / ".nictune" / "audit.jsonl"
    lines = audit.read_text().splitlines()
    assert {json.loads(x)["knob"] for x in lines} >= {"nic/rx1-veth0/napi/gro_flush_timeout"}
    code, out = cli("deploy", plan, "--inventory", inv, capsys=capsys)
    assert code == 0 and {h["status"] for h in out["hosts"].values()} == {"unchanged"}
    assert audit.read_text().splitlines() == lines  # nothing changed, nothing logged

    other = str(lab.write_plan(tmp_path / "other.yaml", {"rx1": NicSetting("active_wait")}))
    code, out = cli("deploy", other, "--inventory", inv, capsys=capsys)
    assert code == 0 and state(lab, "rx1")["gro_flush_timeout"] == 0
    assert state(lab, "rx1")["gro"] == "off"  # back to the ORIGINAL value, not plan 1's
    assert snap.read_text() == original  # the original snapshot is kept

    code, out = cli("rollback", "--inventory", inv, capsys=capsys)
    assert code == 0 and out["hosts"]["rx1"]["status"] == "rolled-back", out["failed"]
    assert out["hosts"]["sender"]["status"] == "no-snapshot"
    assert not snap.exists()


def test_optimized_lab_plan_deploys(lab: Lab, tmp_path: Path, pristine: dict,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nictune.optimizer.cli")
    code = main(["optimize", str(lab.config), "--out", str(tmp_path), "--population", "8",
                 "--generations", "2", "--verify", "none"])
    capsys.readouterr()
    assert code == 0
    code, out = cli("deploy", str(tmp_path / "plan.yaml"), "--inventory",
                    str(lab.inventory), capsys=capsys)
    assert code == 0, out
    code, _ = cli("rollback", "--inventory", str(lab.inventory), capsys=capsys)
    assert code == 0


ECHO = ("import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 9999))\n"
        "while True:\n    data, peer = s.recvfrom(64); s.sendto(data, peer)\n")
RTT = ("import socket, statistics, sys, time\n"
       "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
       "rtt = []\n"
       "for _ in range(30):\n"
       "    t = time.perf_counter(); s.sendto(b'x', (sys.argv[1], 9999)); s.recvfrom(64)\n"
       "    rtt.append(time.perf_counter() - t); time.sleep(0.002)\n"
       "print(statistics.median(rtt))\n")


def test_veth_napi_knobs_act_only_on_what_its_napi_takes(
        lab: Lab, tmp_path: Path, pristine: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """The fallback for veth's missing coalescing, gro_flush_timeout (20 ms here), defers
    only the packets veth's NAPI takes. From the sender's veth with TSO on (veth's
    default) they go to the CPU's backlog: the knob is written but bypassed, and deploy
    says so. With the sender's TSO off they go through NAPI and wait for the timer."""
    inv = str(lab.inventory)
    slow = NicSetting("passive_wait", ring_slots=4096, poll_interval=0.02, irq_core=1)
    code, out = cli("deploy", str(lab.write_plan(tmp_path / "plan.yaml", {"rx1": slow})),
                    "--inventory", inv, capsys=capsys)
    assert code == 0 and state(lab, "rx1")["gro_flush_timeout"] == 20_000_000
    warnings = [n["detail"] for n in out["hosts"]["rx1"]["notes"]
                if (n["backend"], n["kind"]) == ("napi", "warning")]
    assert warnings and "a peer with TSO on" in warnings[0]
    link = lab.link("rx1")
    server = subprocess.Popen(["ip", "netns", "exec", lab.host("rx1").netns,
                               sys.executable, "-c", ECHO])
    try:
        def median_rtt() -> float:
            return float(lab.exec("sender", [sys.executable, "-c", RTT,
                                             link.receiver_address]).stdout)

        time.sleep(0.3)
        assert median_rtt() < 0.005  # bypassed: no wait for the 20 ms timer
        lab.exec("sender", ["ethtool", "-K", link.sender_iface, "tso", "off"])
        assert median_rtt() > 0.005  # through veth's NAPI: deferred
    finally:
        lab.exec("sender", ["ethtool", "-K", link.sender_iface, "tso", "on"])
        server.kill()
        server.wait()
        code, _ = cli("rollback", "--inventory", inv, capsys=capsys)
    assert code == 0


def block_writes(directory: Path) -> None:
    """Make writing into `directory` fail for real: immutable (chattr +i), or — where the
    filesystem has no such attribute (tmpfs) — a plain file where the directory should be."""
    directory.mkdir(parents=True, exist_ok=True)
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(directory)],
                                                 capture_output=True).returncode == 0:
        return
    directory.rmdir()
    directory.write_text("in the way\n")


def unblock_writes(directory: Path) -> None:
    if directory.is_file():
        directory.unlink()
    else:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_failed_write_mid_apply_is_restored(lab: Lab, tmp_path: Path, pristine: dict,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    capture = Path(lab.host("rx1").root) / "etc/nictune/capture"
    block_writes(capture)  # the capture profile (the last knob) cannot be written
    try:
        plan = str(lab.write_plan(tmp_path / "plan.yaml", {"rx1": RX1, "rx2": RX2}))
        code, out = cli("deploy", plan, "--inventory", str(lab.inventory), capsys=capsys)
    finally:
        unblock_writes(capture)
    rx1 = out["hosts"]["rx1"]
    assert code == 1 and out["failed"].keys() == {"rx1"} and out["succeeded"] == ["rx2"]
    assert rx1["status"] == "restored" and rx1["restore_verified"] is True
    assert "pfring" in rx1["error"]
    assert state(lab, "rx1") == pristine["rx1"]  # the earlier knobs were put back
    log = [json.loads(x) for x in (lab.dir / ".nictune/audit.jsonl").read_text().splitlines()]
    restored = {x["knob"] for x in log if x["host"] == "rx1" and x["action"] == "restore"}
    assert "nic/rx1-veth0/napi/gro_flush_timeout" in restored
    code, _ = cli("rollback", "--inventory", str(lab.inventory), capsys=capsys)
    assert code == 0


def test_sshd_killed_mid_apply(lab: Lab, pristine: dict) -> None:
    host = load_inventory(lab.inventory).hosts["rx1"]
    ns = lab.host("rx1").netns
    # Waits inside the namespace for the first knob of the apply step to change.
    watcher = subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c",
                                "while [ \"$(cat /sys/class/net/veth0/gro_flush_timeout)\" "
                                "= 0 ]; do :; done"])
    killer = threading.Thread(target=lambda: (watcher.wait(20), lab.kill_sshd("rx1")))
    killer.start()
    try:
        with Connection(host) as conn:
            result = apply_host(conn, host, {"rx1-veth0": RX1}, Options(guard_timeout=3))
    finally:
        killer.join(30)
        watcher.kill()
    assert not result.ok and result.status == "failed"
    assert "timer restores" in result.error
    armed = Path(lab.host("rx1").root) / "var/lib/nictune/armed"
    wait_for(lambda: not armed.exists(), 15, "the on-host timer")
    wait_for(lambda: state(lab, "rx1") == pristine["rx1"], 5, "the timer's restore")
    lab.start_sshd("rx1")
    with Connection(host) as conn:  # the next contact records what the timer did
        assert apply_host(conn, host, {"rx1-veth0": RX1}).ok
    log = (lab.dir / ".nictune/audit.jsonl").read_text()
    assert '"action": "timer-restore"' in log
    assert main(["rollback", "--inventory", str(lab.inventory), "--hosts", "rx1"]) == 0


def copy_inventory(lab: Lab, tmp: Path, known_hosts: str, key: Path | None = None,
                   extra_nics: dict[str, str] | None = None) -> Path:
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["defaults"]["key_file"] = str(key or lab.key_file)
    (tmp / "known_hosts").write_text(known_hosts)
    for name, nics in (extra_nics or {}).items():
        doc["hosts"]["rx1"]["nics"][name] = nics
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_unknown_and_changed_host_keys(lab: Lab, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    inv = copy_inventory(lab, tmp_path, "")
    code, out = cli("probe", "--inventory", str(inv), "--hosts", "rx1", capsys=capsys)
    assert code == 1 and "unknown host key" in out["failed"]["rx1"]
    code, out = cli("probe", "--inventory", str(inv), "--hosts", "rx1",
                    "--trust-on-first-use", capsys=capsys)
    assert code == 0 and lab.host("rx1").address in (tmp_path / "known_hosts").read_text()
    lines = lab.known_hosts.read_text().splitlines()
    rx1_addr, rx2_key = lab.host("rx1").address, lines[2].split(" ", 1)[1]
    inv = copy_inventory(lab, tmp_path, f"{rx1_addr} {rx2_key}\n")  # someone else's key
    for extra in ([], ["--trust-on-first-use"]):
        code, out = cli("probe", "--inventory", str(inv), "--hosts", "rx1", *extra,
                        capsys=capsys)
        assert code == 1 and "CHANGED" in out["failed"]["rx1"]


def test_wrong_client_key(lab: Lab, tmp_path: Path, pristine: dict,
                          capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    inv = copy_inventory(lab, tmp_path, lab.known_hosts.read_text(), key=key)
    plan = str(lab.write_plan(tmp_path / "plan.yaml", {"rx1": RX1}))
    code, out = cli("deploy", plan, "--inventory", str(inv), capsys=capsys)
    assert code == 1 and "authentication failed" in out["failed"]["rx1"]


def test_confirm_timeout(lab: Lab, tmp_path: Path, pristine: dict,
                         capsys: pytest.CaptureFixture[str]) -> None:
    inv = str(lab.inventory)
    plan = str(lab.write_plan(tmp_path / "plan.yaml", {"rx1": RX1}))
    code, out = cli("deploy", plan, "--inventory", inv, "--confirm-timeout", "2",
                    capsys=capsys)
    assert code == 0 and out["hosts"]["rx1"]["status"] == "pending-confirm"
    assert state(lab, "rx1")["gro_flush_timeout"] == 200000
    code, out = cli("deploy", plan, "--inventory", inv, capsys=capsys)
    assert code == 1 and out["hosts"]["rx1"]["status"] == "refused"  # awaits confirmation
    wait_for(lambda: state(lab, "rx1") == pristine["rx1"], 10, "the confirm timer")
    code, out = cli("deploy", "--confirm", "--inventory", inv, "--hosts", "rx1", capsys=capsys)
    assert code == 1 and out["hosts"]["rx1"]["status"] == "restored"  # too late

    code, out = cli("deploy", plan, "--inventory", inv, "--confirm-timeout", "30",
                    capsys=capsys)
    assert code == 0
    code, out = cli("deploy", "--confirm", "--inventory", inv, "--hosts", "rx1", capsys=capsys)
    assert code == 0 and out["hosts"]["rx1"]["status"] == "confirmed"
    assert state(lab, "rx1")["gro_flush_timeout"] == 200000
    code, _ = cli("rollback", "--inventory", inv, capsys=capsys)
    assert code == 0


def test_ssh_interface_keeps_its_queues(lab: Lab, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A plan for the interface carrying the SSH session: its RX queues are never cut
    (RSS kept), so without ring control (veth) nothing needs --allow-mgmt-iface; the
    refusal of a ring change there is tested on a real mlx5 probe
    (test_deploy_backends.py::test_mgmt_interface_guard)."""
    inv = str(copy_inventory(lab, tmp_path, lab.known_hosts.read_text(),
                             extra_nics={"rx1-mgmt": "mgmt0"}))
    lab.exec("rx1", ["ethtool", "-L", "mgmt0", "rx", "2"])

    def rx_queues() -> str:
        return lab.exec("rx1", ["ethtool", "-l", "mgmt0"]).stdout.split("Current")[1]

    try:
        doc = {"nictune_plan": 1, "transmissions": [
            {"id": "t", "host": "rx1", "nic": "rx1-mgmt", "setting": {
                "mode": "active_wait", "ring_slots": 1024}}]}
        plan = tmp_path / "plan.yaml"
        plan.write_text(yaml.safe_dump(doc))
        code, out = cli("deploy", str(plan), "--inventory", inv, capsys=capsys)
        assert code == 0 and out["hosts"]["rx1"]["status"] == "applied", out["failed"]
        assert "RX:\t\t2" in rx_queues()
        assert not any("/channels/" in c["knob"] for c in out["hosts"]["rx1"]["changes"])
        code, out = cli("rollback", "--inventory", inv, capsys=capsys)
        assert code == 0 and "RX:\t\t2" in rx_queues()
    finally:
        lab.exec("rx1", ["ethtool", "-L", "mgmt0", "rx", "1"], check=False)


def test_second_lab_and_teardown(lab: Lab, tmp_path: Path) -> None:
    with lab_hosts(tmp_path / "other", hosts=2) as other:
        assert other.id != lab.id
        assert {h.netns for h in other.hosts}.isdisjoint({h.netns for h in lab.hosts})
        pids = [h.sshd_pid for h in other.hosts]
        names = [h.netns for h in other.hosts] + [other.mgmt_netns]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names)
    assert not any(process_alive(p) for p in pids)
    assert not (tmp_path / "other" / "inventory.yaml").exists()
    assert all(Path(f"/proc/{h.sshd_pid}").exists() for h in lab.hosts)  # ours untouched


def netns_of(ident: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [w for w in listed.split() if w.startswith(f"nt{ident}-")]


def test_a_failed_up_leaves_a_lab_of_the_same_id_alone(
        lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two `lab up` of one id racing past the clash check: the loser's clean-up deleted
    every nt<id>-* namespace and killed the winner's sshds (a review). It now deletes
    only the namespaces it added. And a refused `up` leaves no new directory."""
    assert main(["lab", "up", "--dir", str(tmp_path / "new"), "--prefix", lab.id]) == 2
    assert "exists already" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    before = sorted(netns_of(lab.id))
    real = lab_module._run
    first = [True]

    def racing(argv: Any, *args: Any, **kwargs: Any) -> Any:
        if list(argv) == ["ip", "netns", "list"] and first[0]:  # the other up not seen yet
            first[0] = False
            return subprocess.CompletedProcess(argv, 0, "", "")
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(lab_module, "_run", racing)
    with pytest.raises(RunError, match="File exists"):
        lab_module.lab_up(tmp_path / "twin", prefix=lab.id)
    monkeypatch.setattr(lab_module, "_run", real)
    assert sorted(netns_of(lab.id)) == before
    assert all(process_alive(h.sshd_pid) for h in lab.hosts)
    assert not (tmp_path / "twin" / "lab.json").exists()


def test_sigterm_during_lab_up_tears_it_down(tmp_path: Path) -> None:
    """`lab` now handles SIGTERM as Ctrl-C: a half-built lab is torn down (it left
    namespaces and sshds running, rc 143 without a word)."""
    ident = f"sg{os.getpid() % 100000}"
    d = tmp_path / "lab"
    proc = subprocess.Popen([sys.executable, "-m", "nictune", "lab", "up", "--hosts", "8",
                             "--prefix", ident, "--dir", str(d)], stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(lambda: (d / "lab.json").exists()
                 and len(json.loads((d / "lab.json").read_text() or "{}").get("made", [])) >= 3,
                 20, "the lab half built")
    except (AssertionError, ValueError):
        proc.kill()
        raise
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err, err
    assert netns_of(ident) == [] and not (d / "lab.json").exists()


def test_sigterm_inside_lab_hosts_tears_the_lab_down(tmp_path: Path) -> None:
    """A benchmark killed with SIGTERM inside `with lab_hosts(...)` (make bench stopped
    by hand) left its namespaces and sshds behind: SIGTERM's default ends Python without
    running `finally`."""
    ident = f"lt{os.getpid() % 100000}"
    d = tmp_path / "lab"
    script = ("import sys, time\nfrom nictune.deploy.lab import lab_hosts\n"
              f"with lab_hosts({str(d)!r}, hosts=2, prefix={ident!r}):\n"
              "    print('up', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        assert len(netns_of(ident)) == 3
    except AssertionError:
        proc.kill()
        raise
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert netns_of(ident) == [] and not (d / "lab.json").exists()


def test_lab_down_by_prefix_when_its_directory_is_gone(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    ident = f"pf{os.getpid() % 100000}"
    made = lab_module.lab_up(tmp_path / "gone", hosts=2, prefix=ident)
    pids = [h.sshd_pid for h in made.hosts]
    shutil.rmtree(tmp_path / "gone")
    assert main(["lab", "down", "--dir", str(tmp_path / "gone")]) == 2
    assert main(["lab", "down", "--prefix", ident]) == 0
    assert "removed 3 items" in capsys.readouterr().out
    assert netns_of(ident) == [] and not any(process_alive(p) for p in pids)


def test_transport_failures_named_for_what_they_are(lab: Lab, tmp_path: Path) -> None:
    """Found by a review: a command killed by a signal was "connection lost" and dropped
    a healthy session; a silent sshd was "ssh: No existing session"; a host key that
    could not be recorded was "No such file or directory" of the connection."""
    host = load_inventory(lab.inventory).hosts["rx1"]
    with Connection(host) as conn:
        res = conn.run("sh -c 'kill -TERM $$'")
        assert not res.ok and res.error_line().startswith("killed by a signal")
        assert conn.connected and conn.run("echo still").stdout == "still\n"
    tofu = replace(host, known_hosts=Path("/proc/nictune-known-hosts"))
    with pytest.raises(HostError, match="cannot record the host key in /proc/nictune-known"):
        Connection(tofu, trust_on_first_use=True).connect()
    sshd = lab.host("rx1").sshd_pid
    os.kill(sshd, signal.SIGSTOP)
    try:
        with pytest.raises(HostError, match=r"did not complete within 1 s"):
            Connection(host, connect_timeout=1).connect()
    finally:
        os.kill(sshd, signal.SIGCONT)
    with Connection(host) as conn:
        assert conn.run("true").ok


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (an sshd listener's per-session processes)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [d for k in kids for d in _descendants(k)]


@contextlib.contextmanager
def _session_stopped_at(lab: Lab, monkeypatch: pytest.MonkeyPatch, method: str
                        ) -> Iterator[list[int]]:
    """While in the block, paramiko's `Channel.<method>` first SIGSTOPs rx1's session
    sshd processes (the host stops answering at that moment); they go on after it.
    Yields the stopped pids."""
    sshd = lab.host("rx1").sshd_pid
    stopped: list[int] = []
    original = getattr(paramiko.Channel, method)

    def stop_then_call(channel: paramiko.Channel, *args: Any) -> Any:
        stopped.extend(_descendants(sshd))
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        return original(channel, *args)

    monkeypatch.setattr(paramiko.Channel, method, stop_then_call)
    try:
        yield stopped
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        monkeypatch.undo()


def test_a_command_the_host_never_answers_times_out(lab: Lab,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by `make bench` (a fault trial hung for 10 minutes): paramiko waits for the
    answer to an exec request without a timeout, so a link that went down after the
    channel opened hung the deploy. The session's sshd is stopped at that moment here
    (real sshd, real paramiko; only the moment of the fault is chosen)."""
    with Connection(load_inventory(lab.inventory).hosts["rx1"]) as conn:
        started = time.monotonic()
        with _session_stopped_at(lab, monkeypatch, "exec_command") as stopped, \
                pytest.raises(CommandTimeout, match=r"did not start the command within 1 s"):
            conn.run("true", timeout=1)
        assert stopped and time.monotonic() - started < 5
        assert not conn.connected  # (dropped: nothing queued is delivered late)
        assert conn.reconnect_if_lost().run("echo again").stdout == "again\n"
        # stopped before its channel opens: the same timeout, not "connection lost"
        # (found by a review: opening a channel had a limit and a message of its own)
        stopped = _descendants(lab.host("rx1").sshd_pid)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(CommandTimeout, match=r"did not start the command within 1 s"):
                conn.run("true", timeout=1)
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        assert conn.reconnect_if_lost().run("echo again").stdout == "again\n"


def test_input_the_host_stops_taking_times_out(lab: Lab, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: a copy stalled after the command started was reported as "the
    host did not start the command". The session's sshd is stopped once the command has
    started, before its 8 MB of input (four times the SSH window) is sent."""
    big = tmp_path / "big"
    big.write_bytes(b"x" * 8_000_000)
    with Connection(load_inventory(lab.inventory).hosts["rx1"], command_timeout=1) as conn:
        started = time.monotonic()
        with _session_stopped_at(lab, monkeypatch, "sendall") as stopped, \
                pytest.raises(CommandTimeout, match=r"did not take the command's input "
                                                    r"within 1 s"):
            conn.put(str(big), "/tmp/nictune-big")
        assert stopped and time.monotonic() - started < 5
        assert not conn.connected


def test_transport_output_timeout_and_sudo(lab: Lab, tmp_path: Path) -> None:
    host = load_inventory(lab.inventory).hosts["rx1"]
    with Connection(host) as conn:
        # 2 MB on each stream: both are drained together, nothing blocks or is lost
        res = conn.run("head -c 2000000 /dev/zero | tr '\\0' a; "
                       "head -c 2000000 /dev/zero | tr '\\0' b >&2; exit 7")
        assert (res.rc, len(res.stdout), len(res.stderr)) == (7, 2000000, 2000000)
        assert conn.run(["printf", "%s", "eth0; reboot"]).stdout == "eth0; reboot"  # quoted
        started = time.monotonic()
        with pytest.raises(CommandTimeout):
            conn.run("sleep 20", timeout=1)
        assert time.monotonic() - started < 5
        if shutil.which("sudo"):
            res = conn.run("id -u; echo $NICTUNE_SSH", sudo=True)
            assert res.stdout.split()[0] == "0" and lab.host("rx1").address in res.stdout
        # a transfer the host refuses is one HostError naming both ends, not paramiko's
        with pytest.raises(HostError, match=r"copy /etc/hostname -> /nonexistent/x failed"):
            conn.put("/etc/hostname", "/nonexistent/x")
    # larger than the SSH window: the refusal closes the channel under the send, and is
    # still the copy's failure with the host's reason, the session kept (a review found
    # "connection lost" and a dropped session)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 8_000_000)
    with Connection(host) as conn:
        with pytest.raises(HostError, match=r"big -> /nonexistent/x failed: .*/nonexistent/x"):
            conn.put(str(big), "/nonexistent/x")
        assert conn.connected and conn.run("echo kept").stdout == "kept\n"
