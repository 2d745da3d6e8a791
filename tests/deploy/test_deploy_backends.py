"""Mode -> knob planning on a probe assembled from real mlx5 / veth outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nictune.deploy import transaction
from nictune.deploy.backends import HostContext, Note, irq_affinity
from nictune.deploy.backends import ethtool_ring as ring
from nictune.deploy.inventory import HostInventory
from nictune.deploy.parsers import ParseError, parse_coalesce
from nictune.deploy.probe import HostProbe, parse_probe
from nictune.deploy.transaction import _mgmt_refusal, plan_changes, read_knobs
from nictune.model import NicSetting

HOST = HostInventory(name="h1", address="10.0.0.1", nics={"nic-1": "enp1s0f0np0"},
                     root="/srv/h1")


def probe_text(shared: Path, *, ssh_on_nic: bool = False, veth: bool = False,
               driver: str = "mlx5_core") -> str:
    d = shared / "data" / "ethtool-samples"
    drv = "veth" if veth else driver
    ssh_addr = "10.0.0.1" if ssh_on_nic else "192.168.1.5"

    def part(cmd: str) -> str:
        f = d / f"{drv}__ethtool-{cmd}__1.txt"
        return f.read_text() if f.exists() else "netlink error: Operation not supported\n"

    return "\n".join([
        "@@section host", "kernel=6.8.12", "cpus=12", "ethtool=ethtool version 6.1",
        "irqbalance=yes", f"ssh=192.168.1.9 50000 {ssh_addr} 22", "pfring=no",
        "sysctl.busy_read=0", "sysctl.busy_poll=0",
        "@@section pfring_params", "@@section pfring_conf",
        b"enable_tx_capture=0\n".hex(" "), "@@eof",  # the file's bytes, as `od` prints them
        "@@section addresses",
        "1: lo    inet 127.0.0.1/8 scope host lo",
        "2: eno1    inet 192.168.1.5/24 brd 192.168.1.255 scope global eno1",
        "3: enp1s0f0np0    inet 10.0.0.1/24 scope global enp1s0f0np0",
        # (the sample is a grep of the file: the kernel's own starts with the CPU header)
        "@@section interrupts", " ".join(f"CPU{i}" for i in range(12)),
        (d / "mlx5_core__proc-interrupts__1.txt").read_text(),
        "@@section affinity", *[f"/proc/irq/{n}/smp_affinity_list:0-11"
                                for n in (98, 99, 109, 110)],
        "@@section timer", "none",
        "@@section nic nic-1", "exists=yes", "speed=25000", "gro_flush_timeout=0",
        "napi_defer_hard_irqs=0", "device=0000:01:00.0", "msi_irqs=", "rps.rx-0=0",
        "@@section ethtool-i nic-1", part("i"),
        "@@section text-c nic-1", part("c"), "@@section text-g nic-1", part("g"),
        "@@section text-l nic-1", part("l"), "@@section text-k nic-1", part("k"),
        "@@section capture nic-1", "@@missing",
    ]) + "\n"


def planned(probe: HostProbe, setting: NicSetting) -> tuple[dict, list[Note]]:
    current = read_knobs(probe)
    ctx = HostContext(HOST, probe, current, {"nic-1": setting})
    changes, notes = plan_changes(ctx, current)
    return {c.knob: c.after for c in changes}, notes


def kinds(notes: list[Note]) -> set[tuple[str, str]]:
    return {(n.backend, n.kind) for n in notes}


@pytest.fixture
def mlx5(shared: Path) -> HostProbe:
    return parse_probe(HOST, probe_text(shared))


def test_probe_of_a_real_nic(mlx5: HostProbe) -> None:
    nic = mlx5.nics["nic-1"]
    assert nic.driver == "mlx5_core" and nic.bus_info == "0000:01:00.0"
    assert nic.coalesce and nic.coalesce["rx-usecs"] == 8
    assert len(nic.irqs) == 13 and nic.irq_affinity[99] == "0-11"
    assert mlx5.ssh_iface == "eno1" and mlx5.irqbalance and mlx5.cpus == 12
    assert mlx5.pfring_conf == "enable_tx_capture=0\n"


def drivers(shared: Path) -> list[str]:
    return sorted({f.name.split("__")[0]
                   for f in (shared / "data" / "ethtool-samples").glob("*__ethtool-*")})


def test_every_value_read_from_a_sample_is_one_a_snapshot_may_hold(shared: Path) -> None:
    """A snapshot is checked knob by knob against what the backends read (a snapshot
    nictune did not write is refused): nothing a real driver gives may be refused."""
    names = drivers(shared)
    assert len(names) >= 10
    for driver in names:
        knobs = read_knobs(parse_probe(HOST, probe_text(shared, driver=driver)))
        assert knobs, driver
        assert [transaction._knob_problem(k, v) for k, v in knobs.items()
                if transaction._knob_problem(k, v)] == [], driver


def test_active_wait_on_mlx5(mlx5: HostProbe) -> None:
    t, notes = planned(mlx5, NicSetting("active_wait", ring_slots=16384, irq_core=3))
    nic = "nic/nic-1"
    assert t[f"{nic}/coalesce/adaptive-rx"] is False
    assert t[f"{nic}/coalesce/rx-usecs"] == 0 and t[f"{nic}/coalesce/rx-frames"] == 1
    assert t[f"{nic}/ring/rx"] == 8192  # clamped to the NIC maximum
    assert f"{nic}/channels/combined" not in t  # RSS queues kept, only their IRQs pinned
    assert t[f"{nic}/irq/99"] == "3" and t[f"{nic}/irq/109"] == "3"
    assert f"{nic}/napi/gro_flush_timeout" not in t  # already 0
    assert t["host/pfring/conf"] == "enable_tx_capture=0 min_num_slots=16384\n"
    profile = json.loads(t[f"{nic}/pfring/profile"])
    assert (profile["mode"], profile["watermark"], profile["blocking"]) == (
        "active_wait", 1, True)
    assert {("ring", "clamped"), ("irq", "warning"), ("pfring", "unavailable"),
            ("channels", "approximation")} <= kinds(notes)


def test_passive_wait_rounds_and_maps(mlx5: HostProbe) -> None:
    t, notes = planned(mlx5, NicSetting("passive_wait", ring_slots=1024,
                                        poll_interval=0.0002505, irq_core=40))
    nic = "nic/nic-1"
    assert t[f"{nic}/coalesce/rx-usecs"] == 251 and t[f"{nic}/coalesce/rx-frames"] == 0
    assert t[f"{nic}/napi/gro_flush_timeout"] == 250500
    assert t[f"{nic}/napi/napi_defer_hard_irqs"] == 2
    assert f"{nic}/ring/rx" not in t  # already 1024
    assert t[f"{nic}/irq/99"] == "11"  # clamped to the last CPU
    profile = json.loads(t[f"{nic}/pfring/profile"])
    assert profile["watermark"] == 512 and profile["poll_duration_ms"] == 1
    assert {("coalesce", "rounded"), ("coalesce", "approximation"), ("irq", "clamped"),
            ("pfring", "clamped")} <= kinds(notes)


def test_watermark_and_busy_poll(mlx5: HostProbe) -> None:
    t, notes = planned(mlx5, NicSetting("watermark", ring_slots=4096, watermark=64,
                                        watermark_timeout=0.0))
    assert t["nic/nic-1/coalesce/rx-frames"] == 64 and t["nic/nic-1/coalesce/rx-usecs"] == 0
    assert json.loads(t["nic/nic-1/pfring/profile"])["poll_duration_ms"] == 65535
    assert ("napi", "not_expressible") in kinds(notes)
    t, _ = planned(mlx5, NicSetting("busy_poll", ring_slots=4096))
    assert t["host/sysctl/busy_read"] == 50 and t["host/sysctl/busy_poll"] == 50
    assert not any("/coalesce/" in k for k in t)  # NIC keeps its original coalescing
    profile = json.loads(t["nic/nic-1/pfring/profile"])
    assert profile["blocking"] is False and profile["busy_poll_us"] == 50


def test_veth_reports_unsupported_with_fallbacks(shared: Path) -> None:
    probe = parse_probe(HOST, probe_text(shared, veth=True))
    t, notes = planned(probe, NicSetting("passive_wait", ring_slots=4096,
                                         poll_interval=0.001, irq_core=1))
    assert t["nic/nic-1/napi/gro_flush_timeout"] == 1000000
    assert not any("/coalesce/" in k or "/ring/" in k for k in t)
    fallbacks = {n.backend: n.fallback for n in notes if n.kind == "unsupported"}
    assert "gro_flush_timeout" in fallbacks["coalesce"]
    assert "min_num_slots" in fallbacks["ring"]


def test_veth_says_when_its_napi_knobs_are_bypassed(shared: Path, mlx5: HostProbe) -> None:
    """A veth's NAPI takes only packets from a peer without TSO, or a local socket's
    with rx-udp-gro-forwarding or rx-gro-list on: with veth's defaults the fallback
    gro_flush_timeout is written but bypassed (docs/deploy.md), and deploy says so."""
    setting = NicSetting("passive_wait", poll_interval=0.001)

    def warning(probe: HostProbe) -> str:
        _, notes = planned(probe, setting)
        return " ".join(n.detail for n in notes if (n.backend, n.kind) == ("napi", "warning"))

    assert "both off: a peer with TSO on" in warning(parse_probe(HOST, probe_text(shared,
                                                                                  veth=True)))
    text = probe_text(shared, veth=True).replace(
        "@@section text-k nic-1\nnetlink error: Operation not supported",
        "@@section text-k nic-1\nFeatures for veth0:\ngeneric-receive-offload: on\n"
        "rx-udp-gro-forwarding: on\nrx-gro-list: off")
    assert "(rx-udp-gro-forwarding on)" in warning(parse_probe(HOST, text))
    assert warning(mlx5) == ""


def test_gro_held_by_another_feature_is_left_alone(shared: Path) -> None:
    text = probe_text(shared)
    line = next(x for x in text.splitlines() if x.startswith("generic-receive-offload:"))
    probe = parse_probe(HOST, text.replace(line, "generic-receive-offload: off [requested on]"))
    assert probe.nics["nic-1"].features["generic-receive-offload"]["requested"] is True
    t, notes = planned(probe, NicSetting("busy_poll"))
    assert not any("/features/" in k for k in t) and "/features/" not in str(read_knobs(probe))
    assert any("held by another feature" in n.detail for n in notes)


def test_rps_steers_every_rx_queue_of_a_nic_without_irq_lines(shared: Path) -> None:
    """A veth with two RX queues: nictune keeps them (no queue-count change), so both
    are steered to irq_core, not rx-0 alone."""
    probe = parse_probe(HOST, probe_text(shared, veth=True).replace(
        "rps.rx-0=0", "rps.rx-0=0\nrps.rx-1=0"))
    assert probe.nics["nic-1"].channels is not None
    t, _ = planned(probe, NicSetting("active_wait", irq_core=1))
    assert t["nic/nic-1/rps/rx-0"] == t["nic/nic-1/rps/rx-1"] == 0b10


def test_active_wait_leaves_rx_frames_alone_where_the_driver_does_not_count_frames(
        mlx5: HostProbe, shared: Path) -> None:
    """i40e has no rx-frames; an ioctl-era ethtool shows it as 0, and any non-zero value
    is refused (EOPNOTSUPP). rx-usecs 0 alone gives an interrupt per packet there."""
    i40e = parse_coalesce((shared / "data/ethtool-samples/i40e__ethtool-c__1.txt").read_text())
    assert i40e["rx-frames"] == 0 and i40e["adaptive-rx"] is True
    mlx5.nics["nic-1"].coalesce = i40e
    t, _ = planned(mlx5, NicSetting("active_wait"))
    assert t["nic/nic-1/coalesce/rx-usecs"] == 0 and "nic/nic-1/coalesce/rx-frames" not in t
    assert t["nic/nic-1/coalesce/adaptive-rx"] is False


def test_active_wait_targets_do_not_depend_on_an_earlier_deploy(mlx5: HostProbe) -> None:
    """After a passive_wait deploy (rx-frames 0), active_wait still sets rx-frames 1 on a
    NIC that counted frames before nictune (mlx5: 128 in the snapshot)."""
    original = read_knobs(mlx5)
    assert original["nic/nic-1/coalesce/rx-frames"] == 128
    mlx5.nics["nic-1"].coalesce.update({"rx-usecs": 250, "rx-frames": 0})
    ctx = HostContext(HOST, mlx5, original, {"nic-1": NicSetting("active_wait")})
    after = {c.knob: c.after for c in plan_changes(ctx, read_knobs(mlx5))[0]}
    assert after["nic/nic-1/coalesce/rx-frames"] == 1
    assert after["nic/nic-1/coalesce/rx-usecs"] == 0


def test_mgmt_interface_guard(shared: Path) -> None:
    probe = parse_probe(HOST, probe_text(shared, ssh_on_nic=True))
    current = read_knobs(probe)
    ctx = HostContext(HOST, probe, current, {"nic-1": NicSetting("active_wait",
                                                                 ring_slots=2048)})
    changes, _ = plan_changes(ctx, current)
    assert "allow-mgmt-iface" in _mgmt_refusal(ctx, changes)
    ctx.settings = {"nic-1": NicSetting("active_wait", ring_slots=1024)}
    probe.nics["nic-1"].channels = None
    current = read_knobs(probe)
    ctx.original = current
    changes, _ = plan_changes(ctx, current)
    assert _mgmt_refusal(ctx, changes) == ""  # coalescing only: allowed


def test_mgmt_guard_covers_devices_under_the_session_and_an_unknown_session(
        shared: Path) -> None:
    probe = parse_probe(HOST, probe_text(shared))  # the session on another interface
    current = read_knobs(probe)
    ctx = HostContext(HOST, probe, current, {"nic-1": NicSetting("active_wait",
                                                                 ring_slots=2048)})
    changes, _ = plan_changes(ctx, current)
    assert _mgmt_refusal(ctx, changes) == ""
    probe.ssh_iface, probe.mgmt_ifaces = "bond0", ["bond0", HOST.nics["nic-1"]]
    assert "(it is under bond0, which does); pass --allow-mgmt-iface" in _mgmt_refusal(
        ctx, changes)
    probe.ssh_iface = probe.mgmt_ifaces = None
    assert "cannot tell which interface carries the SSH session" in _mgmt_refusal(
        ctx, changes)


def test_read_back_comparisons() -> None:
    assert ring.matches("nic/n/ring/rx", 1000, 1024)  # driver rounded up to a power of 2
    assert ring.matches("nic/n/ring/rx", 4100, 4096)  # multiple of 8
    assert not ring.matches("nic/n/ring/rx", 1024, 512)
    assert irq_affinity.matches("nic/n/irq/5", "0-2", "0,1,2")
    assert not irq_affinity.matches("nic/n/irq/5", "1", "0-1")
    assert not ring.matches("nic/n/ring/rx", 1000, 1024, exact=True)  # a snapshot's size


def test_a_ring_left_larger_is_restored_and_a_rounded_plan_is_unchanged(
        mlx5: HostProbe) -> None:
    """A rollback to the snapshot's 1000 slots from 1024 is a change (the driver holds
    the 1000 it reported); a redeploy of ring_slots 1000 that the driver rounded to 1024
    is not. Also the deploy of another NIC's plan puts this one's ring back exactly."""
    key = "nic/nic-1/ring/rx"
    mlx5.nics["nic-1"].ring["current"]["rx"] = 1024
    current = read_knobs(mlx5)
    restore, _ = plan_changes(HostContext(HOST, mlx5, {key: 1000}, {}), current,
                              targets={key: 1000})
    assert [(c.knob, c.before, c.after) for c in restore] == [(key, 1024, 1000)]
    redeploy = HostContext(HOST, mlx5, {**current, key: 512},
                           {"nic-1": NicSetting("active_wait", ring_slots=1000)})
    assert key not in {c.knob for c in plan_changes(redeploy, current)[0]}
    other = HostContext(HOST, mlx5, {**current, key: 1000}, {})
    assert [c.after for c in plan_changes(other, current)[0] if c.knob == key] == [1000]


def test_a_rollbacks_read_back_is_exact(mlx5: HostProbe,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollback verifies its "after" values, which are the snapshot's: a ring left at
    1024 must not pass for the 1000 it was to be put back to (it did, as rounding, and
    the snapshot was archived). A planned ring of 1000 read back as 1024 still passes."""
    key = "nic/nic-1/ring/rx"
    mlx5.nics["nic-1"].ring["current"]["rx"] = 1024
    monkeypatch.setattr(transaction, "probe_host", lambda conn: mlx5)
    rollback, _ = plan_changes(HostContext(HOST, mlx5, {key: 1000}, {}), {key: 512},
                               targets={key: 1000})
    assert transaction._verify(None, rollback, "after") == [  # type: ignore[arg-type]
        f"{key}: wanted 1000, reads 1024"]
    deploy, _ = plan_changes(HostContext(HOST, mlx5, {key: 512}, {
        "nic-1": NicSetting("active_wait", ring_slots=1000)}), {key: 512})
    assert [c.knob for c in deploy if c.knob == key] == [key]
    assert transaction._verify(None, [c for c in deploy if c.knob == key],  # type: ignore
                               "after") == []


@pytest.mark.parametrize(("old", "new", "message"), [
    ("cpus=12", "cpus=-1", "CPU count"),
    ("rps.rx-0=0", "rps.rx-0=n/a", "CPU mask"),
    ("smp_affinity_list:0-11", "smp_affinity_list:abc", "CPU list"),
    ("@@section nic nic-1", "@@section nic nic-9", "does not name"),
    # a knob's value that is not digits: garbled, never saved in a snapshot and written back
    ("gro_flush_timeout=0", "gro_flush_timeout=-1",
     "gro_flush_timeout: expected a count, got '-1'"),
    # /proc/interrupts that `cat` could not print, or garbage: not "the NIC has no IRQs"
    ("@@section interrupts\n", "@@section interrupts\n@@section unread\n",
     "/proc/interrupts unreadable"),
    ("@@section interrupts\n", "@@section interrupts\nhello world\n12: abc def\n"
     "@@section unread\n", "/proc/interrupts unreadable"),
    # `ethtool --json` failing for another reason than "not supported" (the ring's text
    # output left in a section nobody reads): not "the NIC has no settable ring"
    ("@@section text-g nic-1", "@@section json-g nic-1\nCannot get device ring settings: "
     "Permission denied\n@@section text-unread nic-1", "neither JSON nor 'not supported'"),
])
def test_garbled_probe_output_is_a_parse_error(shared: Path, old: str, new: str,
                                               message: str) -> None:
    """One garbled line of a probe (a fuzz run's): a ParseError, which probe_host retries
    and then reports as ProbeError — never a ValueError or KeyError that escapes the
    deploy's restore, never a negative CPU count clamped into an IRQ core."""
    with pytest.raises(ParseError, match=message):
        parse_probe(HOST, probe_text(shared).replace(old, new, 1))
