"""PF_RING (DESIGN §2): module parameters in /etc/pf_ring/pf_ring.conf (`min_num_slots` =
the largest ring_slots of the host's NICs) and, per interface, the capture profile that
the validation agent reads (/etc/nictune/capture/IFACE.json):

| mode | watermark | poll_duration_ms | watermark_timeout (ms) | blocking |
|---|---|---|---|---|
| active_wait | 1 | 500 | 0 | yes |
| passive_wait | ring/2 | T | 0 | yes |
| watermark | W | timeout (65535 when there is none) | timeout | yes |
| busy_poll | 1 | 0 | 0 | no (busy_poll_us for SO_BUSY_POLL) |

The kernel caps the watermark at min_num_slots/2 and the poll duration is whole
milliseconds in 16 bits: clamping and rounding are reported. Without the PF_RING module the
files are still written (the conf applies when the module loads) and that is reported.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from nictune.deploy.backends import (
    BUSY_POLL_US,
    HostContext,
    Note,
    default_matches,
    host_key,
    nic_key,
    originals,
    split_key,
)
from nictune.deploy.probe import PFRING_CONF, HostProbe, capture_profile_path
from nictune.model import PFRING_POLL_DURATION, NicSetting

NAME = "pfring"
PROFILE_FORMAT = 1
MAX_POLL_MS = 65535
matches = default_matches


def valid(knob: str, value: Any) -> bool:
    """A file's text, or None where there was no file (any text: it was the host's):
    the host's pf_ring.conf, a NIC's capture profile."""
    nic, _, param = split_key(knob)
    return param == ("profile" if nic else "conf") and isinstance(value, str | None)


def read(probe: HostProbe) -> dict[str, Any]:
    out: dict[str, Any] = {host_key(NAME, "conf"): probe.pfring_conf}
    for nic_id, nic in probe.nics.items():
        out[nic_key(nic_id, NAME, "profile")] = nic.capture_profile
    return out


def _ms(seconds: float, what: str, ctx: HostContext, nic: str, notes: list[Note]) -> int:
    exact = seconds * 1000.0
    value = min(MAX_POLL_MS, max(1, round(exact)))
    if value != exact:
        kind = "rounded" if 1 <= exact <= MAX_POLL_MS else "clamped"
        notes.append(ctx.note(nic, NAME, kind, f"{what} {exact:g} ms -> {value} ms (PF_RING "
                                               "takes whole milliseconds, 1..65535)"))
    return value


def profile(ctx: HostContext, nic: str, s: NicSetting, min_slots: int,
            notes: list[Note]) -> dict[str, Any]:
    """The capture profile of one NIC (deterministic: re-deploying changes nothing)."""
    cap = max(1, min_slots // 2)
    p: dict[str, Any] = {"nictune_capture": PROFILE_FORMAT, "nic": nic,
                         "iface": ctx.host.iface(nic), "mode": s.mode,
                         "ring_slots": s.ring_slots, "irq_core": s.irq_core,
                         "placement": s.placement, "blocking": True, "busy_poll_us": 0,
                         "watermark": 1, "watermark_timeout": 0,
                         "poll_duration_ms": round(PFRING_POLL_DURATION * 1000),
                         "setting": s.to_json(),
                         "pfring_available": ctx.probe.pfring_loaded}
    if s.mode == "passive_wait":
        p["watermark"] = max(1, s.ring_slots // 2)
        p["poll_duration_ms"] = _ms(s.poll_interval or 0.0, "poll interval", ctx, nic, notes)
    elif s.mode == "watermark":
        p["watermark"] = s.watermark or 1
        timeout = s.watermark_timeout or 0.0
        if timeout > 0:
            p["watermark_timeout"] = p["poll_duration_ms"] = _ms(
                timeout, "watermark timeout", ctx, nic, notes)
        else:
            p["poll_duration_ms"] = MAX_POLL_MS
            notes.append(ctx.note(nic, NAME, "approximation",
                                  f"no watermark timeout: the longest poll duration "
                                  f"({MAX_POLL_MS} ms) stands in for 'never'"))
    elif s.mode == "busy_poll":
        p.update(blocking=False, poll_duration_ms=0, busy_poll_us=BUSY_POLL_US)
    if p["watermark"] > cap:
        notes.append(ctx.note(nic, NAME, "clamped", f"watermark {p['watermark']} -> {cap} "
                                                   f"(PF_RING caps it at min_num_slots/2)"))
        p["watermark"] = cap
    return p


def _conf(text: str | None, min_slots: int) -> str:
    """pf_ring.conf with min_num_slots set, other module parameters kept in order."""
    tokens = (text or "").split()
    out, seen = [], False
    for token in tokens:
        if token.startswith("min_num_slots="):
            token, seen = f"min_num_slots={min_slots}", True
        out.append(token)
    if not seen:
        out.append(f"min_num_slots={min_slots}")
    return " ".join(out) + "\n"


def plan(ctx: HostContext) -> tuple[dict[str, Any], list[Note]]:
    targets = {k: v for k, v in originals(ctx, "").items() if split_key(k)[1] == NAME}
    notes: list[Note] = []
    if not ctx.settings:
        return targets, notes
    if not ctx.probe.pfring_loaded:
        notes.append(ctx.note("", NAME, "unavailable",
                              "the PF_RING kernel module is not loaded: pf_ring.conf applies "
                              "when it loads; capture profiles are written for the agent"))
    elif ctx.probe.pfring_params.get("min_num_slots"):
        notes.append(ctx.note("", NAME, "warning", "a changed min_num_slots takes effect when "
                                                   "the pf_ring module is reloaded"))
    min_slots = max(s.ring_slots for s in ctx.settings.values())
    targets[host_key(NAME, "conf")] = _conf(ctx.original.get(host_key(NAME, "conf")),
                                            min_slots)
    for nic, s in ctx.settings.items():
        body = profile(ctx, nic, s, min_slots, notes)
        targets[nic_key(nic, NAME, "profile")] = json.dumps(body, indent=2,
                                                            sort_keys=True) + "\n"
    return targets, notes


def _file_command(path: str, content: str | None) -> str:
    q = shlex.quote(path)
    if content is None:
        return f"if [ -e {q} ]; then rm -f {q}; fi"
    c, tmp = shlex.quote(content), shlex.quote(path + ".nictune-tmp")
    # Skip when equal (restores stay idempotent); write via temp file + rename, the temp
    # file a copy of the old one first so that its mode and owner stay (a 0640
    # pf_ring.conf came back 0644)
    return (f"printf '%s' {c} | cmp -s - {q} || {{ mkdir -p {shlex.quote(path.rsplit('/', 1)[0])}"
            f" && {{ [ ! -e {q} ] || cp -p {q} {tmp}; }} && printf '%s' {c} > {tmp}"
            f" && mv -f {tmp} {q}; }}")


def commands(ctx: HostContext, values: dict[str, Any]) -> list[str]:
    out = []
    for key, value in values.items():
        nic = split_key(key)[0]
        path = (capture_profile_path(ctx.host, ctx.host.iface(nic)) if nic
                else ctx.host.remote_path(PFRING_CONF))
        out.append(_file_command(path, value))
    return out

