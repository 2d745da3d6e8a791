"""Kernel busy polling (DESIGN §2): `net.core.busy_read` and `net.core.busy_poll` (µs) are
BUSY_POLL_US while any NIC of the host is in busy_poll, else their original values. Where
the sysctls are absent (inside a network namespace they belong to the initial namespace
only) this is reported `unsupported`: the capturing application's per-socket
SO_BUSY_POLL/SO_PREFER_BUSY_POLL (capture profile `busy_poll_us`) carries it."""

from __future__ import annotations

from typing import Any

from nictune.deploy.backends import (
    BUSY_POLL_US,
    HostContext,
    Note,
    default_matches,
    host_key,
    originals,
    split_key,
)
from nictune.deploy.parsers import is_int
from nictune.deploy.probe import SYSCTLS, HostProbe

NAME = "sysctl"
matches = default_matches


def valid(knob: str, value: Any) -> bool:
    """busy_read and busy_poll are ints the kernel keeps ≥ 0 (proc_dointvec_minmax)."""
    nic, _, param = split_key(knob)
    return not nic and param in SYSCTLS and is_int(value) and 0 <= value <= 2**31 - 1


def read(probe: HostProbe) -> dict[str, Any]:
    return {host_key(NAME, k): v for k, v in probe.sysctls.items() if v is not None}


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = originals(ctx, f"host/{NAME}/")
    busy = [n for n, s in ctx.settings.items() if s.mode == "busy_poll"]
    if not busy:
        return targets, []
    notes = []
    for name in SYSCTLS:
        key = host_key(NAME, name)
        if key in ctx.original:
            targets[key] = BUSY_POLL_US
        else:
            notes.append(ctx.note("", NAME, "unsupported",
                                  f"net.core.{name} is not available on this host (network "
                                  "namespace or kernel without busy polling)",
                                  f"per-socket SO_BUSY_POLL={BUSY_POLL_US} us and "
                                  "SO_PREFER_BUSY_POLL in the capture profile"))
    return targets, notes


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    out = []
    for key, value in values.items():
        name = split_key(key)[2]
        if name not in SYSCTLS:
            raise ValueError(f"unknown sysctl {name!r}")
        out.append(f"echo {int(value)} > /proc/sys/net/core/{name}")
    return out
