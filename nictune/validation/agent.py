"""The receiving agent: count one transmission's UDP packets in a given receive mode.

Standard library only; the validator ships this file (with `pfring.py` beside it) to the
receiving host over its SSH session and runs it as
`python3 agent.py --iface IFACE --port PORT --mode MODE --json`.

Back ends, in order of preference:
- PF_RING through nictune's ctypes binding when `libpfring.so` loads (DESIGN §2 mapping:
  poll watermark, poll duration, watermark timeout; blocking or spinning `pfring_recv`);
- AF_PACKET with a memory-mapped ring otherwise:
  * passive_wait — TPACKET_V2 frames read by a reader that is its own timer: it sleeps
    `poll_interval` at a time and drains whatever arrived, empty or not (the kernel's
    TPACKET_V3 block timer skips empty blocks and so never wakes a reader for nothing);
  * watermark — TPACKET_V3 blocks sized to hold W packets of the transmission's size
    (a block is whole pages, so the effective W is reported) with `watermark_timeout`
    as the block timeout (0 cannot be expressed: 65.535 s is used, reported);
  * active_wait — TPACKET_V2 frames: V3 wakes its reader only when a block retires, V2
    calls the socket's data-ready hook per frame, so the reader is woken per packet (a
    watermark of 1 too: a wake-up per packet);
  * busy_poll — a TPACKET_V3 ring of small blocks (1 ms timeout) spun on without ever
    sleeping (no poll(2)).
A classic BPF filter keeps only IPv4 UDP packets to the transmission's port.

The JSON result: packets, bytes, first/last arrival (kernel timestamps), last delivery,
wake-ups (poll(2) returns that found the ring ready; passive_wait: the reader's timer
ticks, empty ones apart; PF_RING: voluntary context switches of the reading thread),
ring drops (PACKET_STATISTICS tp_drops / pfring_stats drop), packets left in the ring
(stranded), packets of other ports read and skipped (foreign_packets, PF_RING only), CPU
seconds and context switches (getrusage of the reading thread), raw counter snapshots
taken just before and after the capture (/proc/interrupts, /proc/softirqs, /proc/stat,
/proc/net/dev, `ethtool -S`).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import mmap
import os
import re
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

try:  # inside the package, or run as a script beside pfring.py on the receiver
    from . import pfring
except ImportError:  # pragma: no cover - exercised on the remote side
    import pfring  # type: ignore[no-redef]

MODES = ("active_wait", "passive_wait", "watermark", "busy_poll")
PROFILE_DIR = "/etc/nictune/capture"
SOL_PACKET, PACKET_RX_RING, PACKET_STATISTICS, PACKET_VERSION = 263, 5, 6, 10
TPACKET_V2, TPACKET_V3 = 1, 2
TP_STATUS_USER = 1
SO_ATTACH_FILTER = 26
SO_BUSY_POLL, SO_PREFER_BUSY_POLL = 46, 69  # <asm-generic/socket.h>
ETH_P_IP = 0x0800
PAGE = mmap.PAGESIZE
V3_BLOCK_HEADER = 48  # struct tpacket_block_desc, 8-aligned, no private area
V3_NETOFF = 96  # TPACKET_ALIGN(TPACKET3_HDRLEN (68) + 16): where the IP header starts
V2_NETOFF = 80  # TPACKET_ALIGN(TPACKET2_HDRLEN (52) + 16)
MAX_TOV_MS = 0xFFFF  # the kernel keeps the block timeout in an unsigned short
COUNTER_FILES = ("/proc/interrupts", "/proc/softirqs", "/proc/stat", "/proc/net/dev")


def block_timer(release: str) -> str:
    """How a kernel of this release runs TPACKET_V3's block timer: from Linux 6.18 an
    hrtimer forwarded by the timeout at each expiry ("free-running": a partial block
    retires at the next tick, whenever it opened); before, a timer restarted each time a
    block opens ("restarted at block open"), the previous block's end."""
    m = re.match(r"(\d+)\.(\d+)", release)
    if not m:
        return "unknown"
    return ("free-running" if (int(m[1]), int(m[2])) >= (6, 18)
            else "restarted at block open")


def _align16(n: int) -> int:
    return (n + 15) & ~15


def _pages(n: int) -> int:
    return max(PAGE, -(-n // PAGE) * PAGE)


def udp_port_filter(port: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF: accept IPv4, UDP, unfragmented-or-first-fragment, dst port `port`."""
    return [
        (0x28, 0, 0, 12),        # ldh [12]            ethertype
        (0x15, 0, 8, ETH_P_IP),  # jeq IPv4 else drop
        (0x30, 0, 0, 23),        # ldb [23]            IP protocol
        (0x15, 0, 6, 17),        # jeq UDP else drop
        (0x28, 0, 0, 20),        # ldh [20]            flags + fragment offset
        (0x45, 4, 0, 0x1FFF),    # jset offset -> drop (no UDP header in later fragments)
        (0xB1, 0, 0, 14),        # ldxb 4*([14]&0xf)   IP header length
        (0x48, 0, 0, 16),        # ldh [x+16]          UDP destination port
        (0x15, 0, 1, port),      # jeq port else drop
        (0x06, 0, 0, 0x40000),   # ret accept (whole packet)
        (0x06, 0, 0, 0),         # ret drop
    ]


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    code = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HP", len(program), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def read_counters(iface: str) -> dict[str, str]:
    """Raw text of the counter sources (parsed by nictune.validation.counters)."""
    out: dict[str, str] = {}
    for path in COUNTER_FILES:
        try:
            with open(path) as fh:
                out[path] = fh.read()
        except OSError:
            out[path] = ""
    try:
        res = subprocess.run(["ethtool", "-S", iface], capture_output=True, text=True,
                             timeout=5)
        out["ethtool -S"] = res.stdout if res.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        out["ethtool -S"] = ""
    return out


def load_profile(iface: str, path: str | None) -> dict[str, Any]:
    """The capture profile the deployer wrote for `iface` ({} when there is none): the
    plan's setting (`setting`), overlaid with what the deployer realised for the host at
    the top level — `busy_poll_us` (its SO_BUSY_POLL fallback) and, in watermark mode, the
    watermark as clamped to PF_RING's cap. A `path` given that does not exist is an error;
    only the default one may be missing."""
    given, path = path is not None, path or os.path.join(PROFILE_DIR, f"{iface}.json")
    try:
        with open(path) as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        if given:
            raise ValueError(f"{path}: no such file") from None
        return {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except ValueError:  # (an integer past Python's limit for reading one)
        raise ValueError(f"{path}: not JSON (an integer of more than 4 300 digits)") from None
    except RecursionError:
        raise ValueError(f"{path}: not JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    setting = raw.get("setting", raw)
    if not isinstance(setting, dict):
        raise ValueError(f"{path}: setting: expected a JSON object")
    out = dict(setting)
    if raw.get("busy_poll_us") is not None:
        out["busy_poll_us"] = raw["busy_poll_us"]
    if out.get("mode") == "watermark" and raw.get("watermark") is not None:
        out["watermark"] = raw["watermark"]
    return out


class Capture:
    """Counts packets; subclasses fill the ring-specific loop."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.packets = 0
        self.bytes = 0
        self.first_ns = 0
        self.last_ns = 0
        self.last_delivery = 0.0
        self.wakeups = 0
        self.empty_wakeups: int | None = 0
        self.foreign = 0  # packets read that were not the transmission's (PF_RING)
        self.notes: list[str] = []
        self.params: dict[str, Any] = {}
        self.stop_reason = ""
        self.started = 0.0
        self.last_seen = 0.0

    def seen(self, count: int, nbytes: int, first_ns: int, last_ns: int) -> None:
        if count <= 0:
            return
        if not self.packets:
            self.first_ns = first_ns
        self.packets += count
        self.bytes += nbytes
        self.last_ns = max(self.last_ns, last_ns)
        self.last_seen = self.last_delivery = time.time()

    def done(self) -> bool:
        """True when the capture should stop (count reached, idle, or deadline)."""
        a = self.args
        if a.count and self.packets >= a.count:
            self.stop_reason = "count"
            return True
        now = time.time()
        if self.packets and now - self.last_seen > a.idle_timeout:
            self.stop_reason = "idle"
            return True
        if not self.packets and now - self.started > a.start_timeout:
            self.stop_reason = "no packets"
            return True
        if a.max_duration and now - self.started > a.max_duration:
            self.stop_reason = "max duration"
            return True
        return False

    def run(self) -> None:
        raise NotImplementedError

    def drops(self) -> tuple[int, int | None]:
        """(ring drops, packets left in the ring unread — None: not observable) at the end."""
        raise NotImplementedError


class PacketRing(Capture):
    """AF_PACKET with a mmap'ed TPACKET ring."""

    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        attach_filter(self.sock, udp_port_filter(args.port))
        # (a watermark of 1 is a wake-up per packet: V2's, exactly; V3's page-sized
        # blocks made it 2 at 1 400 B and 6 at 512 B, stranding packets below it)
        per_frame = args.mode in ("active_wait", "passive_wait") or (
            args.mode == "watermark" and args.watermark == 1)
        self.version = TPACKET_V2 if per_frame else TPACKET_V3
        self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, self.version)
        if self.version == TPACKET_V2:
            self._setup_v2()
        else:
            self._setup_v3()
        self.ring = mmap.mmap(self.sock.fileno(), self.block_size * self.block_nr,
                              mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.sock.bind((args.iface, ETH_P_IP))
        if args.mode == "busy_poll" and args.busy_poll_us > 0:
            self._socket_busy_poll(args.busy_poll_us)
        self.poller = select.poll()
        self.poller.register(self.sock.fileno(), select.POLLIN | select.POLLERR)

    def _socket_busy_poll(self, usecs: int) -> None:
        """Per-socket kernel busy polling (the deployer's fallback where the net.core
        sysctls are absent); each option that the kernel refuses is noted, not hidden."""
        for name, level, value in (("SO_BUSY_POLL", SO_BUSY_POLL, usecs),
                                   ("SO_PREFER_BUSY_POLL", SO_PREFER_BUSY_POLL, 1)):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, level, value)
                self.params[name.lower()] = value
            except OSError as exc:
                self.notes.append(f"{name} not set: {exc.strerror}")

    def _setup_v2(self) -> None:
        a = self.args
        self.frame_size = 1 << max(7, (V2_NETOFF + a.packet_size + 14 - 1).bit_length())
        self.block_size = max(PAGE, self.frame_size)
        per_block = self.block_size // self.frame_size
        self.block_nr = max(1, -(-a.ring_slots // per_block))
        self.frame_nr = per_block * self.block_nr
        req = struct.pack("IIII", self.block_size, self.block_nr, self.frame_size,
                          self.frame_nr)
        self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
        wake = "per packet (watermark 1)" if a.mode == "watermark" else "per packet"
        if a.mode == "passive_wait":
            wake = f"the reader's own timer, every {a.poll_interval * 1000:g} ms"
        self.params = {"ring": "tpacket_v2", "frames": self.frame_nr,
                       "frame_size": self.frame_size, "wake": wake}

    def _setup_v3(self) -> None:
        a = self.args
        frame = _align16(V3_NETOFF + a.packet_size)
        if a.mode == "watermark":
            want = a.watermark
            tov_ms = round(a.watermark_timeout * 1000)
            if a.watermark_timeout == 0:
                tov_ms = MAX_TOV_MS
                self.notes.append("watermark timeout 0 (none) is not expressible with "
                                  f"TPACKET_V3: block timeout {MAX_TOV_MS} ms used")
        else:  # busy_poll: small blocks, short timeout, never sleeps
            want = max(1, (64 * 1024 - V3_BLOCK_HEADER) // frame)
            tov_ms = 1
        if tov_ms < 1:
            self.notes.append(f"block timeout {tov_ms} ms raised to 1 ms (ms resolution)")
            tov_ms = 1
        if tov_ms > MAX_TOV_MS:
            self.notes.append(f"block timeout {tov_ms} ms clamped to {MAX_TOV_MS} ms")
            tov_ms = MAX_TOV_MS
        self.block_size = _pages(V3_BLOCK_HEADER + want * frame)
        per_block = (self.block_size - V3_BLOCK_HEADER) // frame
        if a.mode == "watermark" and per_block != want:
            self.notes.append(f"watermark {want} packets rounded to {per_block} "
                              f"(blocks are whole pages, {frame} B per packet)")
        self.block_nr = max(2, -(-a.ring_slots // per_block))
        frame_size = min(_align16(frame), self.block_size)
        frame_nr = (self.block_size // frame_size) * self.block_nr
        req = struct.pack("IIIIIII", self.block_size, self.block_nr, frame_size, frame_nr,
                          tov_ms, 0, 0)
        started = time.time()  # the kernel starts the block timer early in this call,
        self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)  # which then waits ~10 ms
        self.params = {"ring": "tpacket_v3", "block_size": self.block_size,
                       "blocks": self.block_nr, "packets_per_block": per_block,
                       "block_timeout_ms": tov_ms,
                       "block_timer": block_timer(os.uname().release),
                       "block_timer_start": started,  # a free-running one ticks from here
                       "wake": "never (spin)" if a.mode == "busy_poll" else "per block"}

    # -- reading -------------------------------------------------------------------

    def _drain_v3(self, block: int) -> tuple[int, bool]:
        """Consume ready blocks from `block` on; returns (next block, anything read)."""
        ring, got = self.ring, False
        while True:
            base = block * self.block_size
            status, num, offset = struct.unpack_from("III", ring, base + 8)
            if not status & TP_STATUS_USER:
                return block, got
            pos, nbytes, first, last = base + offset, 0, 0, 0
            for i in range(num):
                nxt, sec, nsec, _snap, length = struct.unpack_from("IIIII", ring, pos)
                nbytes += length
                if i == 0:
                    first = sec * 1_000_000_000 + nsec
                if i == num - 1:
                    last = sec * 1_000_000_000 + nsec
                pos += nxt
            self.seen(num, nbytes - 14 * num, first, last)
            struct.pack_into("I", ring, base + 8, 0)
            block = (block + 1) % self.block_nr
            got = True

    def _drain_v2(self, frame: int) -> tuple[int, bool]:
        ring, got, size = self.ring, False, self.frame_size
        while True:
            base = frame * size
            status, length = struct.unpack_from("II", ring, base)
            if not status & TP_STATUS_USER:
                return frame, got
            sec, nsec = struct.unpack_from("II", ring, base + 16)
            ts = sec * 1_000_000_000 + nsec
            self.seen(1, length - 14, ts, ts)
            struct.pack_into("I", ring, base, 0)
            frame = (frame + 1) % self.frame_nr
            got = True

    def run(self) -> None:
        drain = self._drain_v2 if self.version == TPACKET_V2 else self._drain_v3
        if self.args.mode == "busy_poll":
            self._spin(drain)
        elif self.args.mode == "passive_wait":
            self._tick()
        else:
            self._wait(drain)

    def _spin(self, drain: Callable[[int], tuple[int, bool]]) -> None:
        pos, spins = 0, 0
        while spins % 256 or not self.done():  # done() is asked every 256 spins
            pos, _ = drain(pos)
            spins += 1

    def _wait(self, drain: Callable[[int], tuple[int, bool]]) -> None:
        """Sleep in poll(2) until the ring is ready, drain, repeat."""
        pos = 0
        while not self.done():
            pos, _ = drain(pos)
            if self.done():
                return
            events = self.poller.poll(200)
            if events:
                self.wakeups += 1
                pos, got = drain(pos)
                if not got:
                    self.empty_wakeups += 1

    def _tick(self) -> None:
        """passive_wait: from the first packet's arrival, wake every poll interval and drain,
        whether or not packets came (DESIGN §2). The wait for the first packet arms the
        timer and is not counted; a tick missed while draining is skipped, as in the model;
        wake-ups count up to the last one that delivered (DESIGN §4's window), not the empty
        ones while the agent waits out its idle timeout."""
        while not self.done() and not self.poller.poll(200):
            pass  # no packet yet
        period, tick, pos, counted = self.args.poll_interval, time.monotonic(), 0, (0, 0)
        while not self.done():
            tick += period
            time.sleep(max(0.0, tick - time.monotonic()))
            pos, got = self._drain_v2(pos)
            self.wakeups += 1
            if got:
                counted = (self.wakeups, self.empty_wakeups)
            else:
                self.empty_wakeups += 1
            tick += period * ((time.monotonic() - tick) // period)  # the ticks it drained through
        self.wakeups, self.empty_wakeups = counted

    def drops(self) -> tuple[int, int | None]:
        size = 12 if self.version == TPACKET_V3 else 8
        raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, size)
        packets, dropped = struct.unpack_from("II", raw)  # packets include the dropped
        return dropped, max(0, packets - dropped - self.packets)

    def close(self) -> None:
        self.ring.close()
        self.sock.close()


def _whole_ms(seconds: float) -> int:
    """A PF_RING time in whole milliseconds, at least 1 (as the deployer writes it)."""
    return max(1, round(seconds * 1000))


class PfringCapture(Capture):
    """PF_RING through the ctypes binding; the user-space check keeps the port's packets."""

    def __init__(self, args: argparse.Namespace, lib: ctypes.CDLL):
        super().__init__(args)
        self.ring = pfring.Ring(lib, args.iface, caplen=args.snaplen)
        mode = args.mode
        if mode == "active_wait":
            self.params["poll_watermark"] = self.ring.set_poll_watermark(1)
        elif mode == "passive_wait":
            self.params["poll_watermark"] = self.ring.set_poll_watermark(
                max(1, args.ring_slots // 2))
            self.params["poll_duration_ms"] = self.ring.set_poll_duration(
                _whole_ms(args.poll_interval))
        elif mode == "watermark":
            self._watermark(args.watermark, args.watermark_timeout)
        self.params["ring"] = "pf_ring"
        if mode != "busy_poll":  # (busy_poll never sleeps: no wake-ups, empty or not)
            self.empty_wakeups = None
            self.notes.append("empty wake-ups are not observable with PF_RING: a blocking "
                              "pfring_recv polls again inside the library")
        self.ring.enable()
        self.port = struct.pack("!H", args.port)

    def _watermark(self, packets: int, timeout: float) -> None:
        """Poll watermark and timeouts; no timeout (0) gets the longest poll duration, as
        from the deployer: a poll duration of 0 makes libpfring poll(2) with timeout 0, a
        busy spin instead of sleeping until the watermark."""
        ms = _whole_ms(timeout) if timeout > 0 else 0
        self.params["poll_watermark"] = self.ring.set_poll_watermark(packets)
        self.params["poll_duration_ms"] = self.ring.set_poll_duration(ms or pfring.MAX_MS)
        self.params["poll_watermark_timeout_ms"] = self.ring.set_poll_watermark_timeout(ms)
        if not ms:
            self.notes.append(f"no watermark timeout: the longest poll duration "
                              f"({pfring.MAX_MS} ms) stands in for 'never'")

    def _ours(self, pkt: bytes) -> bool:
        if len(pkt) < 38 or pkt[12:14] != b"\x08\x00" or pkt[23] != 17:
            return False
        ihl = (pkt[14] & 0x0F) * 4
        return pkt[14 + ihl + 2:14 + ihl + 4] == self.port

    def run(self) -> None:
        """Receive until done. Wake-ups are the reading thread's voluntary context switches
        (a blocking recv sleeps in poll(2)); the watchdog thread's own are not counted."""
        wait = self.args.mode != "busy_poll"
        stop = threading.Event()

        def watchdog() -> None:  # a blocking pfring_recv only returns after breakloop
            while not stop.wait(0.1):
                if self.done():
                    self.ring.breakloop()
                    return

        if wait:
            threading.Thread(target=watchdog, daemon=True).start()
        switches = _rusage()[1]
        try:
            self._receive(wait)
        finally:
            stop.set()
        self.wakeups = _rusage()[1] - switches
        self.notes.extend(self.ring.notes)

    def _receive(self, wait: bool) -> None:
        header = self.ring.header
        while True:
            pkt = self.ring.recv(wait)
            if pkt is None:
                if self.done():
                    return
                continue
            if not self._ours(pkt):
                self.foreign += 1
            else:
                ts = header.extended_hdr.timestamp_ns or (
                    header.ts.tv_sec * 1_000_000_000 + header.ts.tv_usec * 1000)
                self.seen(1, header.len - 14, ts, ts)
                if self.args.count and self.packets >= self.args.count:
                    self.stop_reason = "count"
                    return

    def drops(self) -> tuple[int, int | None]:
        queued = self.ring.queued()
        if queued is None:
            self.notes.append("stranded packets are not observable: the PF_RING library "
                              "has no pfring_get_num_queued_pkts")
        return int(self.ring.stats().drop), queued

    def close(self) -> None:
        self.ring.close()


def _rusage() -> tuple[float, int, int]:
    """CPU seconds, voluntary and involuntary context switches of the calling thread (the
    reading one: PF_RING's watchdog thread wakes 10 times a second)."""
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_utime + ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw


def capture(args: argparse.Namespace) -> dict[str, Any]:
    """Open the ring, signal readiness, count until done, return the result dict."""
    lib = None if args.backend == "af_packet" else pfring.load(args.pfring_lib)
    if args.backend == "pfring" and lib is None:
        raise RuntimeError("libpfring.so could not be loaded")
    cap: PfringCapture | PacketRing = (PfringCapture(args, lib) if lib is not None
                                       else PacketRing(args))
    try:
        before = read_counters(args.iface)
        cpu0, vol0, invol0 = _rusage()
        cap.started = cap.last_seen = time.time()
        if args.ready_file:
            with open(args.ready_file, "w") as fh:
                fh.write(str(os.getpid()))
        cap.run()
        cpu1, vol1, invol1 = _rusage()
        ended = time.time()
        dropped, stranded = cap.drops()
        after = read_counters(args.iface)
    finally:
        cap.close()
    return {
        "agent": 1,
        "backend": "pfring" if lib is not None else "af_packet",
        "iface": args.iface, "port": args.port, "mode": args.mode,
        "setting": {"ring_slots": args.ring_slots, "watermark": args.watermark,
                    "watermark_timeout_s": args.watermark_timeout,
                    "poll_interval_s": args.poll_interval},
        "ring": cap.params,
        "packets": cap.packets, "bytes": cap.bytes,
        "first_arrival": cap.first_ns / 1e9 if cap.packets else None,
        "last_arrival": cap.last_ns / 1e9 if cap.packets else None,
        "last_delivery": cap.last_delivery if cap.packets else None,
        "started": cap.started, "ended": ended, "stop_reason": cap.stop_reason,
        "wakeups": cap.wakeups, "empty_wakeups": cap.empty_wakeups,
        "ring_drops": dropped, "stranded": stranded, "foreign_packets": cap.foreign,
        "cpu_s": cpu1 - cpu0, "voluntary_switches": vol1 - vol0,
        "involuntary_switches": invol1 - invol0,
        "context_switches": (vol1 - vol0) + (invol1 - invol0),
        "notes": cap.notes,
        "counters_before": before, "counters_after": after,
    }


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage dump) and exit code 2, like nictune's."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def _number(kind: type, low: float, high: float | None = None, above: bool = False
            ) -> Callable[[str], Any]:
    """An argparse type: a `kind` (int or float) of at least `low` (more than it with
    `above`) and at most `high`."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
            ok = (math.isfinite(value) and (value > low if above else value >= low)
                  and (high is None or value <= high))
        except ValueError:
            ok = False
        if not ok:
            bound = f"more than {low:g}" if above else f"at least {low:g}"
            raise argparse.ArgumentTypeError(
                f"expected {'a whole number' if kind is int else 'a number'} {bound}"
                f"{f' and at most {high:g}' if high is not None else ''}, got {text!r}")
        return value

    return parse


# the setting's values, from the command line or the capture profile: (option, profile
# key, kind, least, more than the least only)
SETTING = {"ring_slots": ("--ring-slots", "ring_slots", int, 1, False),
           "watermark": ("--watermark", "watermark", int, 1, False),
           "watermark_timeout": ("--watermark-timeout", "watermark_timeout_s", float, 0, False),
           "poll_interval": ("--poll-interval", "poll_interval_s", float, 0, True),
           "busy_poll_us": ("--busy-poll-us", "busy_poll_us", int, 0, False)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog="agent.py", description=__doc__.splitlines()[0])
    p.add_argument("--iface", required=True)
    p.add_argument("--port", type=_number(int, 1, 65535), required=True,
                   help="UDP destination port")
    p.add_argument("--mode", choices=MODES,
                   help="receive mode (default: the deployer's capture profile)")
    p.add_argument("--profile", help=f"capture profile JSON (default {PROFILE_DIR}/IFACE.json)")
    p.add_argument("--ring-slots", type=int)
    p.add_argument("--watermark", type=int)
    p.add_argument("--watermark-timeout", type=float, help="seconds")
    p.add_argument("--poll-interval", type=float, help="seconds")
    p.add_argument("--busy-poll-us", type=int,
                   help="busy_poll: SO_BUSY_POLL microseconds (default: the profile's)")
    p.add_argument("--packet-size", type=_number(int, 1, 65535), default=1500,
                   help="IP packet size (bytes)")
    p.add_argument("--snaplen", type=_number(int, 1, 65535), default=2048,
                   help="bytes of each packet the ring keeps")
    p.add_argument("--count", type=_number(int, 0), default=0,
                   help="stop after this many packets (0: no limit)")
    p.add_argument("--idle-timeout", type=_number(float, 0.0, above=True), default=2.0,
                   help="stop this long after the last packet (s)")
    p.add_argument("--start-timeout", type=_number(float, 0.0, above=True), default=30.0,
                   help="give up if no packet arrives within this (s)")
    p.add_argument("--max-duration", type=_number(float, 0.0), default=0.0,
                   help="stop after this long in any case (s; 0: no limit)")
    p.add_argument("--backend", choices=("auto", "pfring", "af_packet"), default="auto")
    p.add_argument("--pfring-lib", help="path to libpfring.so")
    p.add_argument("--ready-file", help="written once the ring is ready for traffic")
    p.add_argument("--out", help="write the JSON result here (atomically)")
    p.add_argument("--json", action="store_true", help="print the JSON result")
    args = p.parse_args(argv)
    try:
        profile = load_profile(args.iface, args.profile)
    except (OSError, ValueError) as exc:  # unreadable, not JSON, not an object
        p.error(f"capture profile: {exc}")
    args.mode = args.mode or profile.get("mode")
    if args.mode not in MODES:
        p.error(f"--mode is required (no capture profile for {args.iface})")
    def pick(*keys: str, default: float) -> float:
        for key in keys:
            if profile.get(key) is not None:
                return profile[key]
        return default

    defaults = {"ring_slots": pick("ring_slots", default=4096),
                "watermark": pick("watermark", default=128),
                "watermark_timeout": pick("watermark_timeout_s", default=0.5),
                "poll_interval": pick("poll_interval_s", default=0.001),
                "busy_poll_us": pick("busy_poll_us", default=0)}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
        option, name, kind, least, above = SETTING[key]
        try:
            setattr(args, key, _number(kind, least, above=above)(str(getattr(args, key))))
        except argparse.ArgumentTypeError as exc:
            p.error(f"{option} (or the capture profile's {name}): {exc}")
    if args.mode == "watermark":
        args.idle_timeout = max(args.idle_timeout, 2 * args.watermark_timeout + 0.5
                                if args.watermark_timeout else args.idle_timeout)
    if args.mode == "passive_wait":
        args.idle_timeout = max(args.idle_timeout, 2 * args.poll_interval + 0.5)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = capture(args)
    except (OSError, RuntimeError, ValueError) as exc:
        result = {"agent": 1, "error": f"{type(exc).__name__}: {exc}"}
    text = json.dumps(result)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, args.out)
    if args.json or not args.out:
        print(text)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
