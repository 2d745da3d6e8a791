"""nictune's own ctypes binding to PF_RING's user library (`libpfring.so`).

Standard library only: this file is shipped to the receiving host beside `agent.py`.
Struct layouts follow PF_RING's `pf_ring.h` / `pfring.h` (written here from the
documented field lists, not copied):

- `struct pfring_pkthdr` = `struct timeval ts; u_int32_t caplen; u_int32_t len;`
  followed by `struct pfring_extended_pkthdr`, whose *short header* is
  `u_int64_t timestamp_ns; u_int32_t flags; u_int8_t rx_direction; int32_t if_index;
  u_int32_t pkt_hash` (natural alignment) and whose remaining, version-dependent part (tx
  info, parsed packet) is only written by the library, never read by nictune: it is kept
  as an opaque, generously sized tail so a newer library cannot write past our buffer.
- `pfring_stat` = `u_int64_t recv, drop, shunt` (older libraries fill only the first two).

The PF_RING kernel module is not installed on nictune's test machines: the binding is
tested against an ABI-compatible fake library compiled by the tests, and on hosts without
PF_RING the agent falls back to AF_PACKET (see docs/validate.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

PF_RING_PROMISC = 1 << 3
PF_RING_ERROR_NO_PKT_AVAILABLE = -3
# The poll duration is milliseconds in a 16-bit field (DESIGN §2); so is the timeout.
MAX_MS = 0xFFFF
EXTENDED_TAIL_BYTES = 512


class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class ExtendedPkthdr(ctypes.Structure):
    """`struct pfring_extended_pkthdr`: the short header, then an opaque tail."""

    _fields_ = [
        ("timestamp_ns", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("rx_direction", ctypes.c_uint8),
        ("if_index", ctypes.c_int32),
        ("pkt_hash", ctypes.c_uint32),
        ("_tail", ctypes.c_uint8 * EXTENDED_TAIL_BYTES),
    ]


class Pkthdr(ctypes.Structure):
    """`struct pfring_pkthdr`."""

    _fields_ = [
        ("ts", Timeval),
        ("caplen", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("extended_hdr", ExtendedPkthdr),
    ]


class Stat(ctypes.Structure):
    """`pfring_stat`."""

    _fields_ = [("recv", ctypes.c_uint64), ("drop", ctypes.c_uint64),
                ("shunt", ctypes.c_uint64)]


class PfringError(OSError):
    """A PF_RING call failed (the return code is in `errno`)."""


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Set the real C signatures on the library's functions."""
    ring = ctypes.c_void_p
    lib.pfring_open.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
    lib.pfring_open.restype = ring
    lib.pfring_enable_ring.argtypes = [ring]
    lib.pfring_enable_ring.restype = ctypes.c_int
    lib.pfring_set_poll_watermark.argtypes = [ring, ctypes.c_uint16]
    lib.pfring_set_poll_watermark.restype = ctypes.c_int
    lib.pfring_set_poll_watermark_timeout.argtypes = [ring, ctypes.c_uint16]
    lib.pfring_set_poll_watermark_timeout.restype = ctypes.c_int
    lib.pfring_set_poll_duration.argtypes = [ring, ctypes.c_uint]
    lib.pfring_set_poll_duration.restype = ctypes.c_int
    lib.pfring_recv.argtypes = [ring, ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte)),
                                ctypes.c_uint, ctypes.POINTER(Pkthdr), ctypes.c_uint8]
    lib.pfring_recv.restype = ctypes.c_int
    lib.pfring_stats.argtypes = [ring, ctypes.POINTER(Stat)]
    lib.pfring_stats.restype = ctypes.c_int
    lib.pfring_breakloop.argtypes = [ring]
    lib.pfring_breakloop.restype = None
    lib.pfring_close.argtypes = [ring]
    lib.pfring_close.restype = None
    if hasattr(lib, "pfring_get_num_queued_pkts"):  # optional: not called where it lacks
        lib.pfring_get_num_queued_pkts.argtypes = [ring]
        lib.pfring_get_num_queued_pkts.restype = ctypes.c_uint32
    return lib


def load(path: str | None = None) -> ctypes.CDLL | None:
    """The PF_RING library, or None when it is not there.

    `path`, else `$NICTUNE_PFRING_LIB`, else `libpfring.so` on the loader's path.
    """
    candidates = [p for p in (path, os.environ.get("NICTUNE_PFRING_LIB")) if p]
    if not candidates:
        candidates = ["libpfring.so", ctypes.util.find_library("pfring") or ""]
    for name in candidates:
        if not name:
            continue
        try:
            return _declare(ctypes.CDLL(name))
        except (OSError, AttributeError):
            continue
    return None


def _clamp_ms(value: int) -> tuple[int, bool]:
    clamped = min(max(int(value), 0), MAX_MS)
    return clamped, clamped != int(value)


class Ring:
    """One open PF_RING socket; methods wrap the C calls and raise on failure."""

    def __init__(self, lib: ctypes.CDLL, device: str, caplen: int = 2048,
                 flags: int = PF_RING_PROMISC):
        self.lib = lib
        self.handle = lib.pfring_open(device.encode(), caplen, flags)
        if not self.handle:
            raise PfringError(ctypes.get_errno(), f"pfring_open({device!r}) failed")
        self.header = Pkthdr()
        self.buffer = ctypes.POINTER(ctypes.c_ubyte)()
        self.notes: list[str] = []

    def _check(self, name: str, rc: int) -> int:
        if rc < 0:
            raise PfringError(rc, f"{name} returned {rc}")
        return rc

    def set_poll_watermark(self, packets: int) -> int:
        value = min(max(int(packets), 1), 0xFFFF)
        if value != packets:
            self.notes.append(f"watermark {packets} clamped to {value}")
        self._check("pfring_set_poll_watermark",
                    self.lib.pfring_set_poll_watermark(self.handle, value))
        return value

    def set_poll_watermark_timeout(self, ms: int) -> int:
        value, clamped = _clamp_ms(ms)
        if clamped:
            self.notes.append(f"watermark timeout {ms} ms clamped to {value} ms")
        self._check("pfring_set_poll_watermark_timeout",
                    self.lib.pfring_set_poll_watermark_timeout(self.handle, value))
        return value

    def set_poll_duration(self, ms: int) -> int:
        value, clamped = _clamp_ms(ms)
        if clamped:
            self.notes.append(f"poll duration {ms} ms clamped to {value} ms")
        self._check("pfring_set_poll_duration",
                    self.lib.pfring_set_poll_duration(self.handle, value))
        return value

    def enable(self) -> None:
        self._check("pfring_enable_ring", self.lib.pfring_enable_ring(self.handle))

    def recv(self, wait: bool) -> bytes | None:
        """One packet (zero-copy buffer copied out up to caplen), or None if none/broken."""
        rc = self.lib.pfring_recv(self.handle, ctypes.byref(self.buffer), 0,
                                  ctypes.byref(self.header), 1 if wait else 0)
        if rc > 0:
            return ctypes.string_at(self.buffer, self.header.caplen)
        if rc == 0 or rc == PF_RING_ERROR_NO_PKT_AVAILABLE:
            return None
        raise PfringError(rc, f"pfring_recv returned {rc}")

    def stats(self) -> Stat:
        stat = Stat()
        self._check("pfring_stats", self.lib.pfring_stats(self.handle, ctypes.byref(stat)))
        return stat

    def queued(self) -> int | None:
        """Packets in the ring not read yet, of any port (None: the library has no
        `pfring_get_num_queued_pkts`). `stats().recv` counts packets read, not these."""
        if not hasattr(self.lib, "pfring_get_num_queued_pkts"):
            return None
        return int(self.lib.pfring_get_num_queued_pkts(self.handle))

    def breakloop(self) -> None:
        self.lib.pfring_breakloop(self.handle)

    def close(self) -> None:
        if self.handle:
            self.lib.pfring_close(self.handle)
            self.handle = None
