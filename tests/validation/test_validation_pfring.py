"""The PF_RING ctypes binding against an ABI-compatible fake libpfring.so built with gcc.

The PF_RING kernel module is not on the test machines; the fake library implements the
real signatures and struct layouts, records the calls and returns synthetic packets, so
the binding's argument types and structures are really exercised through the C ABI.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from nictune.deploy.backends import HostContext
from nictune.deploy.backends import pfring as pfring_backend
from nictune.deploy.inventory import HostInventory
from nictune.model import NicSetting
from nictune.validation import agent, pfring

SOURCE = Path(__file__).with_name("fake_pfring.c")


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    out = tmp_path_factory.mktemp("pfring") / "libpfring.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out),
                    str(SOURCE)], check=True)
    out.with_name("none.json").write_text("{}")  # a capture profile that sets nothing
    return out


def calls(lib: ctypes.CDLL) -> list[str]:
    lib.fake_pfring_calls.restype = ctypes.c_char_p
    return lib.fake_pfring_calls().decode().split()


def test_struct_layouts_match_the_c_compiler(fake_lib: Path) -> None:
    lib = pfring.load(str(fake_lib))
    assert lib is not None
    layout = (ctypes.c_size_t * 9)()
    lib.fake_pfring_layout(layout)
    ext = pfring.ExtendedPkthdr
    assert layout[1] == pfring.Pkthdr.caplen.offset
    assert layout[2] == pfring.Pkthdr.len.offset
    assert layout[3] == pfring.Pkthdr.extended_hdr.offset
    assert (layout[4], layout[5], layout[6], layout[7]) == (
        ext.flags.offset, ext.rx_direction.offset, ext.if_index.offset, ext.pkt_hash.offset)
    assert layout[8] == ctypes.sizeof(pfring.Stat)
    assert ctypes.sizeof(pfring.Pkthdr) >= layout[0]  # room for whatever the library writes


def test_calls_round_trip_through_the_abi(fake_lib: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PFRING_PACKETS", "3")
    monkeypatch.setenv("FAKE_PFRING_SIZE", "200")
    monkeypatch.setenv("FAKE_PFRING_DROP", "5")
    lib = pfring.load(str(fake_lib))
    ring = pfring.Ring(lib, "eth7", caplen=1600, flags=pfring.PF_RING_PROMISC)
    assert ring.set_poll_watermark(64) == 64
    assert ring.set_poll_duration(70_000) == pfring.MAX_MS  # 16-bit ms: clamped, reported
    assert ring.set_poll_watermark_timeout(20) == 20
    ring.enable()
    packets = [ring.recv(wait=False) for _ in range(4)]
    assert [len(p) for p in packets[:3]] == [214, 214, 214] and packets[3] is None
    assert packets[0][36:38] == (9000).to_bytes(2, "big")
    hdr = ring.header
    assert (hdr.caplen, hdr.len, hdr.extended_hdr.if_index) == (214, 214, 7)
    assert hdr.extended_hdr.pkt_hash == 2 and hdr.extended_hdr.rx_direction == 1
    assert hdr.extended_hdr.timestamp_ns == 1_000_000_000_000 + 2000
    stat = ring.stats()
    assert (stat.recv, stat.drop) == (3, 5)
    ring.close()
    assert calls(lib) == ["open", "eth7", "1600", str(pfring.PF_RING_PROMISC), "watermark",
                          "64", "duration", "65535", "watermark_timeout", "20", "enable",
                          "stats", "close"]
    assert any("clamped" in n for n in ring.notes)


def test_missing_library_is_none() -> None:
    assert pfring.load("/nonexistent/libpfring.so") is None


def pfring_args(fake_lib: Path, mode: str, *extra: str) -> argparse.Namespace:
    return agent.parse_args([
        "--iface", "eth7", "--port", "9000", "--mode", mode, "--backend", "pfring",
        "--pfring-lib", str(fake_lib), "--profile", str(fake_lib.with_name("none.json")),
        *extra])


@pytest.mark.parametrize("timeout, duration_ms, timeout_ms", [
    (0.0, pfring.MAX_MS, 0), (0.0004, 1, 1), (0.25, 250, 250)])
def test_watermark_poll_duration_is_the_deployers(fake_lib: Path, monkeypatch: pytest.MonkeyPatch,
                                                  timeout: float, duration_ms: int,
                                                  timeout_ms: int) -> None:
    """A poll duration of 0 (no timeout, or one under 0.5 ms) makes libpfring's blocking
    recv poll(2) with timeout 0: a busy spin. The deployer's profile says 65535 ms for
    'never' and 1 ms at least; the agent sets the same."""
    monkeypatch.setenv("FAKE_PFRING_PACKETS", "10")
    result = agent.capture(pfring_args(fake_lib, "watermark", "--watermark", "32",
                                       "--watermark-timeout", str(timeout), "--count", "10"))
    assert (result["ring"]["poll_duration_ms"],
            result["ring"]["poll_watermark_timeout_ms"]) == (duration_ms, timeout_ms)
    log = calls(pfring.load(str(fake_lib)))
    assert log[log.index("duration") + 1] == str(duration_ms)
    assert any("stands in for 'never'" in n for n in result["notes"]) == (timeout == 0)
    host = HostInventory(name="rx", address="10.0.0.2", nics={"n": "eth7"})
    ctx = HostContext(host, SimpleNamespace(pfring_loaded=True), {})  # type: ignore[arg-type]
    setting = NicSetting("watermark", watermark=32, watermark_timeout=timeout)
    assert pfring_backend.profile(ctx, "n", setting, 4096, [])["poll_duration_ms"] == duration_ms


def test_wakeups_are_the_reading_threads_alone(fake_lib: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The recv below never sleeps (FAKE_PFRING_SPIN), so the reading thread makes no
    voluntary switch in its second of idling; the watchdog thread that ends the blocking
    recv wakes ten times a second and counted with getrusage(RUSAGE_SELF) (10+ here)."""
    monkeypatch.setenv("FAKE_PFRING_PACKETS", "50")
    monkeypatch.setenv("FAKE_PFRING_SPIN", "1")
    result = agent.capture(pfring_args(fake_lib, "active_wait", "--idle-timeout", "1.0"))
    assert result["packets"] == 50 and result["stop_reason"] == "idle"
    assert result["wakeups"] < 5


def test_stranded_packets_are_those_left_in_the_ring(fake_lib: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """pfring_stats' recv counts packets read (of any port), so recv - packets was the
    other ports' packets (94 here), not the 30 the watermark left in the ring."""
    monkeypatch.setenv("FAKE_PFRING_PACKETS", "500")
    monkeypatch.setenv("FAKE_PFRING_OTHER", "5")
    monkeypatch.setenv("FAKE_PFRING_STRAND", "30")
    result = agent.capture(pfring_args(fake_lib, "watermark", "--watermark", "64",
                                       "--watermark-timeout", "0.05", "--idle-timeout", "0.2"))
    assert (result["packets"], result["foreign_packets"], result["stranded"]) == (376, 94, 30)
    monkeypatch.setattr(pfring.Ring, "queued", lambda _ring: None)  # an older library
    result = agent.capture(pfring_args(fake_lib, "busy_poll", "--idle-timeout", "0.2"))
    assert result["stranded"] is None
    assert any("stranded packets are not observable" in n for n in result["notes"])


@pytest.mark.parametrize("mode, expected", [
    ("active_wait", ["watermark", "1"]),
    ("watermark", ["watermark", "32", "duration", "250", "watermark_timeout", "250"]),
    ("passive_wait", ["watermark", "512", "duration", "2"]),
    ("busy_poll", []),
])
def test_agent_counts_through_pfring(fake_lib: Path, monkeypatch: pytest.MonkeyPatch,
                                     mode: str, expected: list[str]) -> None:
    monkeypatch.setenv("FAKE_PFRING_PACKETS", "500")
    monkeypatch.setenv("FAKE_PFRING_SIZE", "300")
    monkeypatch.setenv("FAKE_PFRING_OTHER", "5")  # every 5th packet is for another port
    result = agent.capture(pfring_args(
        fake_lib, mode, "--ring-slots", "1024", "--watermark", "32", "--watermark-timeout",
        "0.25", "--poll-interval", "0.002", "--packet-size", "300", "--idle-timeout", "0.3"))
    assert result["backend"] == "pfring"
    assert result["packets"] == 400 and result["bytes"] == 400 * 300
    assert result["first_arrival"] == pytest.approx(1000.0)
    assert result["stop_reason"] == "idle"
    assert (result["foreign_packets"], result["stranded"]) == (100, 0)
    blocking = mode != "busy_poll"  # its empty wake-ups are hidden in libpfring's loop
    assert result["empty_wakeups"] == (None if blocking else 0)
    assert any("empty wake-ups are not observable" in n for n in result["notes"]) == blocking
    lib = pfring.load(str(fake_lib))
    log = calls(lib)
    tail = ["queued", "stats", "close"]
    tail = tail if mode == "busy_poll" else ["breakloop", *tail]
    assert log[4:-len(tail)] == [*expected, "enable"]
    assert log[-len(tail):] == tail
