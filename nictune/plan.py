"""The plan file: the only thing that crosses from offline (optimizer) to online (deploy,
validation) (DESIGN §1, §5).

`plan.yaml` lists, per transmission, its host and NIC, the chosen setting, the default
setting it replaces and the model's predictions for both. This module reads and writes
it and validates every field, so a hand-edited or corrupted plan is refused with a
one-line message before any host is touched. It imports nothing from `simulator` or
`optimizer`.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nictune.errors import InputError, read_yaml
from nictune.files import atomic_write
from nictune.model import (
    _ID,
    MAX_INTERVAL,
    MIN_INTERVAL,
    MODES,
    NAME_RULE,
    PLACEMENTS,
    NicSetting,
)
from nictune.units import is_finite_number

PLAN_FORMAT = 1
SETTING_JSON_KEYS = ("mode", "poll_interval_s", "watermark", "watermark_timeout_s",
                     "ring_slots", "irq_core", "placement")


class PlanError(InputError):
    """A plan that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class PlanEntry:
    """One transmission of the plan."""

    id: str
    host: str
    nic: str
    setting: NicSetting
    default_setting: NicSetting
    packet_size: int = 1500
    rate_pps: float = 0.0
    size_bytes: float = 0.0
    predicted: dict[str, dict[str, Any]] = field(default_factory=dict)  # default/optimized
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    entries: list[PlanEntry]
    config: str = ""
    config_hash: str = ""
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)  # engine, verify, prefer, versions...
    source: str = "<plan>"

    def entry(self, tid: str) -> PlanEntry:
        for e in self.entries:
            if e.id == tid:
                return e
        raise PlanError(f"{self.source}: no transmission {tid!r} in the plan")

    def nic_settings(self) -> dict[tuple[str, str], NicSetting]:
        """The setting each (host, nic) must get; transmissions sharing a NIC must agree."""
        out: dict[tuple[str, str], NicSetting] = {}
        owner: dict[tuple[str, str], str] = {}
        for e in self.entries:
            key = (e.host, e.nic)
            if key in out and out[key] != e.setting:
                raise PlanError(
                    f"{self.source}: transmissions {owner[key]!r} and {e.id!r} give nic "
                    f"{e.nic!r} on host {e.host!r} different settings; a NIC has one")
            out[key], owner[key] = e.setting, e.id
        return out


def _check_setting(raw: object, where: str) -> NicSetting:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in SETTING_JSON_KEYS]
    if unknown:
        raise PlanError(f"{where}.{unknown[0]}: unknown key (allowed: "
                        f"{', '.join(SETTING_JSON_KEYS)})")

    def fail(key: str, reason: str) -> PlanError:
        return PlanError(f"{where}.{key}: {reason}, got {raw.get(key)!r}")

    def integer(key: str, low: int, high: int, default: int | None = None) -> int:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(key, f"must be a whole number between {low} and {high}")
        return value

    def seconds(key: str, low: float) -> float:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                low <= value <= MAX_INTERVAL):
            raise fail(key, f"must be seconds between {low:g} and {MAX_INTERVAL:g}")
        return float(value)

    mode = raw.get("mode")
    if mode not in MODES:
        raise fail("mode", f"must be one of {', '.join(MODES)}")
    ring = integer("ring_slots", 1, 1 << 20)
    placement = raw.get("placement", "same_core")
    if placement not in PLACEMENTS:
        raise fail("placement", f"must be one of {', '.join(PLACEMENTS)}")
    setting = NicSetting(mode=mode, ring_slots=ring, irq_core=integer("irq_core", 0, 4095, 0),
                         placement=placement)
    for key, needed in (("poll_interval_s", "passive_wait"), ("watermark", "watermark"),
                        ("watermark_timeout_s", "watermark")):
        if raw.get(key) is not None and mode != needed:
            raise fail(key, f"is not used by mode {mode}")
    if mode == "passive_wait":
        return NicSetting(**{**setting.__dict__, "poll_interval": seconds("poll_interval_s",
                                                                          MIN_INTERVAL)})
    if mode == "watermark":
        if ring < 2:  # (the watermark is at most half the ring: "between 1 and 0")
            raise fail("ring_slots", f"a watermark needs a ring of at least 2 slots, got {ring}")
        timeout = 0.0 if raw.get("watermark_timeout_s") is None else seconds(
            "watermark_timeout_s", 0.0)
        return NicSetting(**{**setting.__dict__, "watermark": integer("watermark", 1, ring // 2),
                             "watermark_timeout": timeout})
    return setting


def _name(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not _ID.match(value):
        raise PlanError(f"{where}.{key}: expected {NAME_RULE}, got {value!r}")
    return value


def _check_predicted(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    """`predicted`: per arm (default, optimized, fast_default, fast_optimized) the metrics
    of DESIGN §4; the numbers the validation report compares must be finite numbers."""
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: expected a mapping, got {type(raw).__name__}")
    for arm, metrics in raw.items():
        if not isinstance(metrics, dict):
            raise PlanError(f"{where}.{arm}: expected a mapping of metrics, got {metrics!r}")
        for key in PREDICTED_NUMBERS:
            value = metrics.get(key)
            if value is not None and not is_finite_number(value):
                raise PlanError(f"{where}.{arm}.{key}: expected a finite number, got {value!r}")
    return raw


PREDICTED_NUMBERS = ("packets_offered", "packets_delivered", "throughput_bps", "offered_bps",
                     "interrupts", "cpu_busy_s", "duration_s", "latency_mean_s",
                     "latency_p99_s")
ENTRY_KEYS = ("id", "host", "nic", "setting", "default_setting", "packet_size", "rate_pps",
              "size_bytes", "predicted", "flags")


def parse_plan(raw: object, source: str = "<plan>", require: tuple[str, ...] = ()) -> Plan:
    """Validate a loaded plan document; the per-transmission keys in `require` must be
    given (a deploy needs only `setting`; a validation measures against `default_setting`
    with packets of `packet_size`, and must not fall back to the setting and 1500 B)."""
    if not isinstance(raw, dict):
        raise PlanError(f"{source}: expected a mapping with 'transmissions', got "
                        f"{type(raw).__name__}")
    if type(raw.get("nictune_plan")) is not int or raw.get("nictune_plan") != PLAN_FORMAT:
        raise PlanError(f"{source}: nictune_plan: expected format {PLAN_FORMAT}, got "
                        f"{raw.get('nictune_plan')!r} (is this a nictune plan?)")
    items = raw.get("transmissions")
    if not isinstance(items, list) or not items:
        raise PlanError(f"{source}: transmissions: expected a non-empty list")
    entries, seen = [], set()
    for i, item in enumerate(items):
        where = f"{source}: transmissions[{i}]"
        if not isinstance(item, dict):
            raise PlanError(f"{where}: expected a mapping")
        unknown = [k for k in item if k not in ENTRY_KEYS]
        if unknown:
            raise PlanError(f"{where}.{unknown[0]}: unknown key")
        missing = [k for k in require if item.get(k) is None]
        if missing:
            raise PlanError(f"{where}.{missing[0]}: is required")
        tid = _name(item, "id", where)
        if tid in seen:
            raise PlanError(f"{where}.id: duplicate id {tid!r}")
        seen.add(tid)
        setting = _check_setting(item.get("setting"), f"{where}.setting")
        default = _check_setting(item.get("default_setting", item.get("setting")),
                                 f"{where}.default_setting")
        size = item.get("packet_size", 1500)
        if isinstance(size, bool) or not isinstance(size, int) or not 64 <= size <= 9000:
            raise PlanError(f"{where}.packet_size: must be 64..9000 bytes, got {size!r}")
        predicted = _check_predicted(item.get("predicted") or {}, f"{where}.predicted")
        flags = item.get("flags") or []
        if not isinstance(flags, list) or not all(isinstance(x, str) for x in flags):
            raise PlanError(f"{where}.flags: expected a list of strings")
        numbers = {}
        for key in ("rate_pps", "size_bytes"):
            value = item.get(key, 0.0)
            if not is_finite_number(value) or value < 0:
                raise PlanError(f"{where}.{key}: expected a finite number >= 0, got {value!r}")
            numbers[key] = float(value)
        entries.append(PlanEntry(
            id=tid, host=_name(item, "host", where), nic=_name(item, "nic", where),
            setting=setting, default_setting=default, packet_size=size,
            predicted=predicted, flags=tuple(flags), **numbers))
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise PlanError(f"{source}: seed: expected a whole number, got {seed!r}")
    if not isinstance(raw.get("config_hash", ""), str):
        raise PlanError(f"{source}: config_hash: expected a string, got "
                        f"{raw.get('config_hash')!r}")
    plan = Plan(entries=entries, config=str(raw.get("config", "")),
                config_hash=str(raw.get("config_hash", "")),
                seed=seed,
                meta={k: v for k, v in raw.items() if k not in (
                    "nictune_plan", "transmissions", "config", "config_hash", "seed")},
                source=source)
    plan.nic_settings()  # refuse NICs given two different settings
    return plan


def load_plan(path: str | Path, require: tuple[str, ...] = ()) -> Plan:
    """Read and validate `plan.yaml` (`require`: see `parse_plan`); `PlanError` (exit 2)
    names what is wrong."""
    path = Path(path)
    raw = read_yaml(path, "plan", PlanError)
    return parse_plan(raw, source=str(path), require=require)


def plan_document(plan: Plan) -> dict[str, Any]:
    """The YAML document for a plan (inverse of `parse_plan`)."""
    doc: dict[str, Any] = {
        "nictune_plan": PLAN_FORMAT,
        "created": plan.meta.get("created") or _dt.datetime.now(_dt.UTC).isoformat(
            timespec="seconds"),
        "config": plan.config,
        "config_hash": plan.config_hash,
        "seed": plan.seed,
        **{k: v for k, v in plan.meta.items() if k != "created"},
        "transmissions": [],
    }
    for e in plan.entries:
        doc["transmissions"].append({
            "id": e.id, "host": e.host, "nic": e.nic,
            "packet_size": e.packet_size, "rate_pps": e.rate_pps, "size_bytes": e.size_bytes,
            "setting": e.setting.to_json(),
            "default_setting": e.default_setting.to_json(),
            "predicted": e.predicted,
            "flags": list(e.flags),
        })
    return doc


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write the plan whole or not at all: a plan cut short by a full disk can still
    parse, with transmissions missing. libyaml's emitter where PyYAML has it: the same
    text, a few times faster for plans of thousands of transmissions."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    atomic_write(Path(path), yaml.dump(plan_document(plan), Dumper=dumper, sort_keys=False))
