"""Domain types and config loading (DESIGN §2–§3).

A config names hosts (cores, cost profile, memory, power), NICs (host, link, ring limits)
and transmissions (size, packet size, offered rate, arrival process, default setting).
`load_config` parses human units to SI and validates every field; any problem raises
`ConfigError` whose one-line message names the file, the field and what was expected.
Unknown keys are errors, so a typo is never silently ignored.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from nictune.errors import InputError, read_yaml
from nictune.units import (
    as_float,
    parse_bitrate,
    parse_byterate,
    parse_duration,
    parse_power,
    parse_rate,
    parse_size,
    shown_int,
)

MODES = ("active_wait", "passive_wait", "watermark", "busy_poll")
ARRIVALS = ("cbr", "poisson", "onoff")
PLACEMENTS = ("same_core", "same_die", "same_package", "cross_package")
# Per-byte cost multiplier of the consumer's placement relative to the IRQ core: the wrong
# pair costs up to 40 % (Faulkner et al., seed paper).
PLACEMENT_COST = {"same_core": 1.0, "same_die": 1.1, "same_package": 1.2, "cross_package": 1.4}
# Preamble + start delimiter (8 B) and inter-frame gap (12 B) that every frame costs the link.
WIRE_OVERHEAD_BYTES = 20
MIN_PACKET, MAX_PACKET = 64, 9000
# PF_RING's defaults: watermark 128, poll duration 500 ms, min_num_slots 4096 (DESIGN §2).
PFRING_WATERMARK, PFRING_POLL_DURATION, PFRING_SLOTS = 128, 0.5, 4096
MIN_INTERVAL, MAX_INTERVAL = 1e-6, 10.0
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
NAME_RULE = "a name of up to 64 letters, digits, '_', '.', '-' (not starting with '_', '.', '-')"


class ConfigError(InputError):
    """A config (or setting) that cannot be used; the message names file and field."""


@dataclass(frozen=True)
class Costs:
    """CPU seconds each unit of receive work costs on the core that does it."""

    irq: float = 4e-6
    per_packet: float = 0.6e-6
    per_byte: float = 0.25e-9
    poll_check: float = 0.05e-6


@dataclass(frozen=True)
class Memory:
    """The host's memory bus, shared by all its transmissions."""

    bandwidth: float = 20e9
    traffic_per_byte: float = 3.0
    sustainable: float = 0.65


@dataclass(frozen=True)
class Power:
    """NIC idle power (None: derived from the link speed) and power of one busy core."""

    nic_idle: float | None = None
    core_busy: float = 15.0


@dataclass(frozen=True)
class Host:
    name: str
    cores: int = 4
    costs: Costs = field(default_factory=Costs)
    memory: Memory = field(default_factory=Memory)
    power: Power = field(default_factory=Power)
    backlog_slots: int = 1000


@dataclass(frozen=True)
class Nic:
    name: str
    host: str
    link: float  # bit/s
    ring_slots: int = PFRING_SLOTS
    min_ring_slots: int = 64
    max_ring_slots: int = 32768
    irq_core: int = 0

    def idle_power(self, host: Host) -> float:
        """Watts the NIC draws idle: the host's figure, else ≈1 W per Gbit/s (1–25 W)."""
        if host.power.nic_idle is not None:
            return host.power.nic_idle
        return min(25.0, max(0.5, self.link / 1e9))


@dataclass(frozen=True)
class NicSetting:
    """A mode plus its parameters (DESIGN §2). Times in seconds."""

    mode: str
    ring_slots: int = PFRING_SLOTS
    poll_interval: float | None = None
    watermark: int | None = None
    watermark_timeout: float | None = None
    irq_core: int = 0
    placement: str = "same_core"

    def to_json(self) -> dict[str, Any]:
        """The contract keys of DESIGN §4 (`poll_interval_s`, `watermark_timeout_s`, ...)."""
        return {
            "mode": self.mode,
            "poll_interval_s": self.poll_interval,
            "watermark": self.watermark,
            "watermark_timeout_s": self.watermark_timeout,
            "ring_slots": self.ring_slots,
            "irq_core": self.irq_core,
            "placement": self.placement,
        }

    def describe(self) -> str:
        """Short human form: `watermark W=128 timeout=500 ms ring=4096`."""
        from nictune.units import format_duration

        parts = [self.mode]
        if self.mode == "passive_wait":
            parts.append(f"every {format_duration(self.poll_interval or 0)}")
        if self.mode == "watermark":
            timeout = self.watermark_timeout or 0
            parts.append(f"W={self.watermark}")
            parts.append(f"timeout={format_duration(timeout)}" if timeout else "no timeout")
        parts.append(f"ring={self.ring_slots}")
        return " ".join(parts)


def pfring_default(nic: Nic) -> NicSetting:
    """PF_RING's defaults in nictune's terms: watermark 128, 500 ms timeout, 4096 slots."""
    slots = min(max(PFRING_SLOTS, nic.min_ring_slots), nic.max_ring_slots)
    return NicSetting(
        mode="watermark",
        watermark=min(PFRING_WATERMARK, slots // 2),
        watermark_timeout=PFRING_POLL_DURATION,
        ring_slots=slots,
        irq_core=nic.irq_core,
    )


@dataclass(frozen=True)
class Transmission:
    id: str
    nic: str
    size: float  # bytes
    packet_size: int  # bytes
    rate: float  # offered packets/s, already capped by the link
    arrival: str = "poisson"
    onoff_on: float = 0.01  # s of each burst (arrival onoff)
    onoff_off: float = 0.01  # s of silence between bursts
    start: float = 0.0  # s after the host's first transmission starts
    max_latency_p99: float | None = None
    default: NicSetting | None = None

    @property
    def packets(self) -> int:
        return max(1, math.ceil(self.size / self.packet_size))


@dataclass(frozen=True)
class Config:
    hosts: dict[str, Host]
    nics: dict[str, Nic]
    transmissions: list[Transmission]
    source: str = "<config>"
    digest: str = ""

    @cached_property
    def _by_id(self) -> dict[str, Transmission]:
        return {t.id: t for t in self.transmissions}

    def transmission(self, tid: str) -> Transmission:
        if tid in self._by_id:
            return self._by_id[tid]
        known = ", ".join(t.id for t in self.transmissions[:10])
        more = ", ..." if len(self.transmissions) > 10 else ""
        raise ConfigError(f"{self.source}: no transmission {tid!r} (known: {known}{more})")

    def nic_of(self, t: Transmission) -> Nic:
        return self.nics[t.nic]

    def host_of(self, t: Transmission) -> Host:
        return self.hosts[self.nics[t.nic].host]

    def default_setting(self, t: Transmission) -> NicSetting:
        """The setting `t`'s NIC has today: its config `default` (one per NIC), else
        PF_RING's."""
        return t.default if t.default is not None else pfring_default(self.nic_of(t))

    def over_link(self) -> list[str]:
        """One line per NIC whose transmissions together ask more than its link (on the
        wire, 20 bytes a frame more): each is capped at the link alone, and the model does
        not share a link among them (docs/model.md, "Arrivals")."""
        out = []
        for name, nic in self.nics.items():
            ts = [t for t in self.transmissions if t.nic == name]
            asked = sum(8.0 * t.rate * (t.packet_size + WIRE_OVERHEAD_BYTES) for t in ts)
            if len(ts) > 1 and asked > nic.link * (1 + 1e-9):
                out.append(f"NIC {name}: {', '.join(t.id for t in ts)} ask "
                           f"{asked / 1e9:.3g} Gbit/s together of its {nic.link / 1e9:.3g} "
                           "Gbit/s link; each is simulated at its own rate, as if alone on "
                           "it (the model does not share a link)")
        return out

    @cached_property
    def several_nics(self) -> frozenset[str]:
        """The hosts where more than one NIC receives a transmission: there NICs can share
        an IRQ core, so the core and the consumer's placement are part of a setting.
        Computed once: reports ask it for every row of every front."""
        per_host = Counter(self.nics[n].host for n in {t.nic for t in self.transmissions})
        return frozenset(h for h, n in per_host.items() if n > 1)

    def by_core(self, transmissions: Iterable[Transmission],
                settings: Mapping[str, NicSetting]) -> dict[tuple[str, int], list[str]]:
        """The ids of `transmissions` per (host, IRQ core) under `settings` (id ->
        setting), in the order given."""
        cores: dict[tuple[str, int], list[str]] = {}
        for t in transmissions:
            cores.setdefault((self.nic_of(t).host, settings[t.id].irq_core), []).append(t.id)
        return cores

    def select(self, ids: Iterable[str] | None) -> list[Transmission]:
        """The named transmissions in the order given (each once), or all of them."""
        if not ids:
            return list(self.transmissions)
        return [self.transmission(i) for i in dict.fromkeys(ids)]


# ----------------------------------------------------------------------------- parsing


class _Fields:
    """A mapping being read at `where` in `source`; reports unknown keys as errors.
    `elsewhere` names the file and path of keys that came from another file (a host
    profile), so their errors name that file."""

    def __init__(self, raw: object, source: str, where: str, allowed: Iterable[str],
                 elsewhere: dict[str, tuple[str, str]] | None = None):
        self.source, self.where, self.elsewhere = source, where, elsewhere or {}
        if not isinstance(raw, dict):
            self.fail(f"expected a mapping, got {type(raw).__name__}")
        self.raw: dict[str, Any] = raw  # type: ignore[assignment]
        unknown = [k for k in self.raw if k not in allowed]
        if unknown:
            self.fail(f"unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})", unknown[0])

    def path(self, key: str | None = None) -> str:
        if key is None:
            return self.where
        return f"{self.where}.{key}" if self.where else key

    def fail(self, reason: str, key: str | None = None) -> None:
        source, where = self.elsewhere.get(key or "", (self.source, self.path(key)))
        raise ConfigError(f"{source}: {where or '(top level)'}: {reason}")

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def get(self, key: str, parse: Callable[[Any], Any], default: Any = None,
            low: float | None = None, high: float | None = None, unit: str = "") -> Any:
        if not self.has(key):
            if default is None:
                return None
            value = default
        else:
            try:
                value = parse(self.raw[key])
            except ValueError as exc:
                self.fail(str(exc), key)
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(f"must be a finite number, got {value}", key)
        if (low is not None and value < low) or (high is not None and value > high):
            self.fail(f"must be between {_fmt(low)} and {_fmt(high)}{unit}, got {_fmt(value)}",
                      key)
        return value

    def required(self, key: str, parse: Callable[[Any], Any], hint: str = "",
                 **limits: Any) -> Any:
        if not self.has(key):
            self.fail(f"is required{hint}", key)
        return self.get(key, parse, **limits)

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.raw.get(key, default)
        if value not in choices:
            self.fail(f"must be one of {', '.join(choices)}, got {value!r}", key)
        return value


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    if isinstance(value, int):
        return shown_int(value)
    # (a whole float past 10^15, 1e300 say, printed all its 301 digits)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"


def _integer(value: Any) -> int:
    if isinstance(value, float) and not math.isfinite(value):  # (int() raises other errors)
        raise ValueError(f"expected a finite whole number, got {value}")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return as_float(value)


def _name(value: Any) -> Any:
    """A reference to a host or NIC as its name: YAML reads `host: 1` as a number, and
    the mapping key `1:` is named "1"."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else value


def _names(section: dict[Any, Any], source: str, what: str) -> dict[str, Any]:
    """`section` keyed by name; `1:` and `'1':` are one name, given twice."""
    out: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(key, bool) or key is None:
            raise ConfigError(f"{source}: {what}: {_NOT_A_NAME} {key!r}")
        if str(key) in out:
            raise ConfigError(f"{source}: {what}: {str(key)!r} is given twice")
        out[str(key)] = value
    return out


# (YAML 1.1 reads yes/no/on/off/true/false as booleans and ~ as null: a host `on:` or an
# id `yes` became "True" and "None")
_NOT_A_NAME = "a name must be text (quote yes, no, on, off, true, false and ~), got"


def _id_text(value: Any) -> str:
    """An id as written: numbers read as their text, booleans and null refused."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{_NOT_A_NAME} {value!r}")
    return _identifier(str(value))


def _identifier(value: Any) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError(f"expected {NAME_RULE}, got {value!r}")
    return value


SETTING_KEYS = ("mode", "poll_interval", "watermark", "watermark_timeout", "ring_slots",
                "irq_core", "placement")


def parse_setting(raw: object, nic: Nic, host: Host, source: str, where: str) -> NicSetting:
    """A `NicSetting` from config form (`{mode: watermark, watermark: 128, ...}`)."""
    f = _Fields(raw, source, where, SETTING_KEYS)
    mode = f.choice("mode", MODES)
    ring = f.get("ring_slots", _integer, nic.ring_slots, nic.min_ring_slots, nic.max_ring_slots,
                 " slots (the NIC's ring limits)")
    setting = NicSetting(
        mode=mode,
        ring_slots=ring,
        irq_core=f.get("irq_core", _integer, nic.irq_core, 0, host.cores - 1,
                       f" (host {host.name} has {host.cores} cores)"),
        placement=f.choice("placement", PLACEMENTS, "same_core"),
    )
    used = {"passive_wait": ("poll_interval",), "watermark": ("watermark", "watermark_timeout")}
    for key in ("poll_interval", "watermark", "watermark_timeout"):
        if f.has(key) and key not in used.get(mode, ()):
            f.fail(f"is not used by mode {mode}", key)
    if mode == "passive_wait":
        setting = replace(setting, poll_interval=f.required(
            "poll_interval", parse_duration, low=MIN_INTERVAL, high=MAX_INTERVAL, unit=" s"))
    if mode == "watermark":
        setting = replace(
            setting,
            watermark=f.required("watermark", _integer, low=1, high=ring // 2,
                                 unit=" packets (half the ring)"),
            watermark_timeout=f.required(
                "watermark_timeout", parse_duration, low=0.0, high=MAX_INTERVAL, unit=" s",
                hint=" (0 for none: the packets below the watermark are then stranded)"),
        )
    return setting


def setting_from_json(raw: dict[str, Any]) -> NicSetting:
    """Inverse of `NicSetting.to_json` (plan files); values are trusted to be SI."""
    return NicSetting(
        mode=raw["mode"],
        ring_slots=int(raw["ring_slots"]),
        poll_interval=raw.get("poll_interval_s"),
        watermark=raw.get("watermark"),
        watermark_timeout=raw.get("watermark_timeout_s"),
        irq_core=int(raw.get("irq_core") or 0),
        placement=raw.get("placement") or "same_core",
    )


def _parse_host(name: str, raw: object, source: str, base: Path) -> Host:
    where = f"hosts.{name}"
    f = _Fields(raw, source, where, ("cores", "profile", "costs", "memory", "power",
                                     "backlog_slots"))
    _identifier_or_fail(name, source, where)
    c, m, p = _host_sections(f, base)
    d = Costs()
    costs = Costs(
        irq=c.get("irq", parse_duration, d.irq, 0.0, 1e-3, " s"),
        per_packet=c.get("per_packet", parse_duration, d.per_packet, 0.0, 1e-3, " s"),
        per_byte=c.get("per_byte", parse_duration, d.per_byte, 0.0, 1e-6, " s"),
        poll_check=c.get("poll_check", parse_duration, d.poll_check, 1e-10, 1e-3, " s"),
    )
    if costs.per_packet == 0 and costs.per_byte == 0:  # the models divide by a packet's work
        c.fail("per_packet and per_byte are both 0: a packet must cost some CPU time",
               "per_packet")
    dm = Memory()
    memory = Memory(
        bandwidth=m.get("bandwidth", parse_byterate, dm.bandwidth, 1e6, 1e13, " B/s"),
        traffic_per_byte=m.get("traffic_per_byte", _number, dm.traffic_per_byte, 1.0, 8.0),
        sustainable=m.get("sustainable", _number, dm.sustainable, 0.05, 1.0),
    )
    power = Power(
        nic_idle=p.get("nic_idle", parse_power, None, 0.0, 500.0, " W"),
        core_busy=p.get("core_busy", parse_power, Power().core_busy, 0.0, 500.0, " W"),
    )
    return Host(
        name=name,
        cores=f.get("cores", _integer, 4, 1, 1024),
        costs=costs, memory=memory, power=power,
        backlog_slots=f.get("backlog_slots", _integer, 1000, 1, 10_000_000),
    )


HOST_SECTIONS = {"costs": ("irq", "per_packet", "per_byte", "poll_check"),
                 "memory": ("bandwidth", "traffic_per_byte", "sustainable"),
                 "power": ("nic_idle", "core_busy")}


def _host_sections(f: _Fields, base: Path) -> list[_Fields]:
    """A host's costs, memory and power: its profile's keys (their errors name the
    profile file) overridden by its own."""
    path = base / str(f.raw["profile"]) if f.has("profile") else None
    profile = _load_profile(path, f.source, f.path("profile")) if path else {}
    out = []
    for key, allowed in HOST_SECTIONS.items():
        own = f.raw[key] if f.has(key) else {}
        if not isinstance(own, dict):
            f.fail("expected a mapping", key)
        theirs = profile.get(key, {})
        elsewhere = {k: (str(path), f"{key}.{k}") for k in theirs if k not in own}
        out.append(_Fields({**theirs, **own}, f.source, f.path(key), allowed, elsewhere))
    return out


def _load_profile(path: Path, source: str, where: str) -> dict[str, dict[str, Any]]:
    """A host profile file (`nictune calibrate` writes one): costs, memory and power."""
    raw = read_yaml(path, f"{source}: {where}", ConfigError)
    f = _Fields(raw, str(path), "", ("costs", "memory", "power", "fit"))
    out: dict[str, dict[str, Any]] = {}
    for key in ("costs", "memory", "power"):
        value = f.raw.get(key) or {}
        if not isinstance(value, dict):
            f.fail("expected a mapping", key)
        out[key] = dict(value)
    return out


def _identifier_or_fail(name: object, source: str, where: str) -> str:
    try:
        return _identifier(name)
    except ValueError as exc:
        raise ConfigError(f"{source}: {where}: {exc}") from None


def _reference(f: _Fields, key: str, known: Mapping[str, Any]) -> str:
    """The name `f[key]` refers to, one of `known` (`host: on` is YAML's True, `host: ~`
    its null: refused as no name, where they read "unknown host True")."""
    value = _name(f.raw.get(key))
    if key not in f.raw:
        f.fail("is required", key)
    if isinstance(value, bool) or value is None:  # (`~` is YAML's null)
        f.fail(f"{_NOT_A_NAME} {value!r}", key)
    if not isinstance(value, str) or value not in known:
        f.fail(f"unknown {key} {value!r} ({key}s: {', '.join(list(known)[:8]) or 'none'})", key)
    return value


def _parse_nic(name: str, raw: object, hosts: dict[str, Host], source: str) -> Nic:
    where = f"nics.{name}"
    _identifier_or_fail(name, source, where)
    f = _Fields(raw, source, where, ("host", "link", "ring_slots", "min_ring_slots",
                                     "max_ring_slots", "irq_core"))
    host = _reference(f, "host", hosts)
    low = f.get("min_ring_slots", _integer, 64, 2, 1 << 20)  # 2: room for a watermark of 1
    high = f.get("max_ring_slots", _integer, max(32768, low), low, 1 << 20)
    return Nic(
        name=name,
        host=host,
        link=f.required("link", parse_bitrate, low=1e6, high=1e12, unit=" bit/s"),
        ring_slots=f.get("ring_slots", _integer, min(max(PFRING_SLOTS, low), high), low, high),
        min_ring_slots=low,
        max_ring_slots=high,
        irq_core=f.get("irq_core", _integer, 0, 0, hosts[host].cores - 1,
                       f" (host {host} has {hosts[host].cores} cores)"),
    )


TRANSMISSION_KEYS = ("id", "nic", "size", "packet_size", "rate", "arrival", "onoff", "start",
                     "max_latency_p99", "default")


def _parse_transmission(i: int, raw: object, nics: dict[str, Nic], hosts: dict[str, Host],
                        source: str) -> Transmission:
    f = _Fields(raw, source, f"transmissions[{i}]", TRANSMISSION_KEYS)
    tid = f.required("id", _id_text)
    nic_name = _reference(f, "nic", nics)
    nic = nics[nic_name]
    packet_size = f.required("packet_size", _integer, low=MIN_PACKET, high=MAX_PACKET,
                             unit=" bytes")
    size = f.required("size", parse_size, low=packet_size, high=1e15, unit=" bytes")
    link_pps = nic.link / (8.0 * (packet_size + WIRE_OVERHEAD_BYTES))
    rate = f.required("rate", lambda v: parse_rate(v, packet_size), low=1e-3, high=1e9,
                      unit=" packets/s")
    arrival = f.choice("arrival", ARRIVALS, "poisson")
    on, off = 0.01, 0.01
    if f.has("onoff"):
        if arrival != "onoff":
            f.fail(f"is only used with arrival onoff, not {arrival}", "onoff")
        onoff = _yaml11_onoff(f.raw["onoff"], f"{source}: {f.path('onoff')}")
        o = _Fields(onoff, source, f.path("onoff"), ("on", "off"))
        on = o.get("on", parse_duration, on, 1e-6, 3600.0, " s")
        off = o.get("off", parse_duration, off, 0.0, 3600.0, " s")
    default = None
    if f.has("default"):
        default = parse_setting(f.raw["default"], nic, hosts[nic.host], source, f.path("default"))
    return Transmission(
        id=tid, nic=nic_name, size=size, packet_size=packet_size,
        rate=min(rate, link_pps), arrival=arrival, onoff_on=on, onoff_off=off,
        start=f.get("start", parse_duration, 0.0, 0.0, 86400.0, " s"),
        max_latency_p99=f.get("max_latency_p99", parse_duration, None, 1e-7, 3600.0, " s"),
        default=default,
    )


def _yaml11_onoff(raw: object, where: str) -> object:
    """YAML 1.1 reads bare `on:`/`off:` keys as booleans; take them back as the names (a
    key given both ways is given twice: the last one won)."""
    if not isinstance(raw, dict):
        return raw
    out: dict[object, object] = {}
    for k, v in raw.items():
        name = {True: "on", False: "off"}[k] if isinstance(k, bool) else k
        if name in out:
            raise ConfigError(f"{where}: {name!r} is given twice")
        out[name] = v
    return out


def parse_config(raw: object, source: str = "<config>", base: Path | None = None) -> Config:
    """Validate an already-loaded YAML document into a `Config`."""
    base = base or Path(".")
    f = _Fields(raw, source, "", ("hosts", "nics", "transmissions"))
    for key in ("hosts", "nics", "transmissions"):
        if not f.raw.get(key):
            f.fail("is required and must not be empty", key)
    if not isinstance(f.raw["hosts"], dict):
        f.fail("expected a mapping of host name to host", "hosts")
    if not isinstance(f.raw["nics"], dict):
        f.fail("expected a mapping of NIC name to NIC", "nics")
    if not isinstance(f.raw["transmissions"], list):
        f.fail("expected a list of transmissions", "transmissions")
    hosts = {n: _parse_host(n, h, source, base)
             for n, h in _names(f.raw["hosts"], source, "hosts").items()}
    nics = {n: _parse_nic(n, v, hosts, source)
            for n, v in _names(f.raw["nics"], source, "nics").items()}
    transmissions = [_parse_transmission(i, t, nics, hosts, source)
                     for i, t in enumerate(f.raw["transmissions"])]
    seen: set[str] = set()
    for i, t in enumerate(transmissions):
        if t.id in seen:
            raise ConfigError(f"{source}: transmissions[{i}].id: duplicate id {t.id!r}")
        seen.add(t.id)
    transmissions = _one_setting_per_nic(transmissions, source)
    text = yaml.safe_dump(raw, sort_keys=True)
    if any(isinstance(h, Mapping) and "profile" in h for h in f.raw["hosts"].values()):
        # a profile file is part of the model, not only its path: with new costs there, a
        # `--resume` took the checkpoint's picks as judged under the old ones
        text += yaml.safe_dump({n: asdict(h) for n, h in hosts.items()}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Config(hosts=hosts, nics=nics, transmissions=transmissions, source=source,
                  digest=f"sha256:{digest}")


def _one_setting_per_nic(transmissions: list[Transmission],
                         source: str) -> list[Transmission]:
    """A NIC has one setting at a time: the `default` one of its transmissions gives is
    every one's (none: PF_RING's); two that differ are an error naming both."""
    given: dict[str, tuple[int, Transmission]] = {}
    for i, t in enumerate(transmissions):
        if t.default is None:
            continue
        j, first = given.setdefault(t.nic, (i, t))
        assert first.default is not None
        ours, theirs = asdict(t.default), asdict(first.default)
        differ = [k for k in ours if not _same(ours[k], theirs[k])]
        if differ:
            raise ConfigError(
                f"{source}: transmissions[{i}].default: {t.id}'s default differs from "
                f"{first.id}'s (transmissions[{j}]) in {', '.join(differ)}, on the same nic "
                f"{t.nic!r}; a NIC has one setting at a time: give its default once, or the "
                "same on each of its transmissions")
    return [t if t.default is not None or t.nic not in given
            else replace(t, default=given[t.nic][1].default) for t in transmissions]


def _same(a: Any, b: Any) -> bool:
    """Equal, numbers to the last few bits: `100us` is 100 · 1e-6 and `0.1ms` 0.1 · 1e-3,
    which differ in the last bit (one default was refused as another)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    return bool(a == b)


def load_config(path: str | Path) -> Config:
    """Load and validate a YAML config file; `ConfigError` names what is wrong."""
    path = Path(path)
    raw = read_yaml(path, "config", ConfigError)
    return parse_config(raw, source=str(path), base=path.parent)

