"""nictune.model: configs parse to SI, and every validation path names file, field, reason."""

from __future__ import annotations

import copy
import csv
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nictune.model import (
    ConfigError,
    NicSetting,
    load_config,
    parse_config,
    parse_setting,
    pfring_default,
    setting_from_json,
)

BASE: dict[str, Any] = {
    "hosts": {"h1": {"cores": 4, "costs": {"irq": "5us", "per_packet": "0.5us"},
                     "memory": {"bandwidth": "10GB/s", "traffic_per_byte": 2},
                     "power": {"nic_idle": "10W", "core_busy": "12W"}, "backlog_slots": 500}},
    "nics": {"n1": {"host": "h1", "link": "1Gbit/s", "ring_slots": 2048,
                    "max_ring_slots": 8192, "irq_core": 1}},
    "transmissions": [
        {"id": "t1", "nic": "n1", "size": "7.5GB", "packet_size": 1400, "rate": "3600pps",
         "arrival": "cbr", "max_latency_p99": "10ms",
         "default": {"mode": "watermark", "watermark": 128, "watermark_timeout": "500ms",
                     "ring_slots": 4096}},
        {"id": "t2", "nic": "n1", "size": "64KiB", "packet_size": 64, "rate": "40Mbit/s",
         "arrival": "onoff", "onoff": {"on": "2ms", "off": "8ms"}, "start": "1s"},
    ],
}


def doc(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes, e.g. doc(**{"transmissions.0.size": "1GB"})."""
    out = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node: Any = out
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return out


_DELETE = object()


def test_base_config_parses_to_si():
    cfg = parse_config(BASE, "x.yaml")
    h = cfg.hosts["h1"]
    assert h.costs.irq == pytest.approx(5e-6) and h.costs.per_packet == pytest.approx(0.5e-6)
    assert h.costs.per_byte == pytest.approx(0.25e-9)  # default kept
    assert h.memory.bandwidth == 10e9 and h.power.nic_idle == 10 and h.backlog_slots == 500
    t1, t2 = cfg.transmissions
    assert t1.size == 7.5e9 and t1.rate == 3600 and t1.packets == math.ceil(7.5e9 / 1400)
    assert t1.max_latency_p99 == pytest.approx(0.01)
    assert t1.default == NicSetting("watermark", ring_slots=4096, watermark=128,
                                    watermark_timeout=0.5, irq_core=1)
    assert t2.size == 65536 and t2.rate == pytest.approx(40e6 / (8 * 64))
    assert (t2.onoff_on, t2.onoff_off, t2.start) == (pytest.approx(2e-3), 8e-3, 1.0)
    assert cfg.default_setting(t2) == pfring_default(cfg.nics["n1"])
    assert cfg.digest.startswith("sha256:")


def test_rate_is_capped_by_the_link():
    cfg = parse_config(doc(**{"transmissions.1.rate": "10Gbit/s"}))
    assert cfg.transmissions[1].rate == pytest.approx(1e9 / (8 * (64 + 20)))


def test_pfring_default_is_watermark_128_500ms_4096():
    cfg = parse_config(BASE)
    s = pfring_default(cfg.nics["n1"])
    assert (s.mode, s.watermark, s.watermark_timeout, s.ring_slots) == ("watermark", 128, 0.5,
                                                                         4096)


def test_setting_json_round_trip():
    s = NicSetting("passive_wait", ring_slots=1024, poll_interval=5e-5, irq_core=2,
                   placement="same_die")
    assert setting_from_json(s.to_json()) == s


def test_exact_packet_size_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = copy.deepcopy(BASE)
    raw["transmissions"] += [dict(BASE["transmissions"][1], id=f"x{i}") for i in range(2)]
    raw["transmissions"][3]["packet_size"] = 70000
    Path("configs").mkdir()
    Path("configs/x.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_config("configs/x.yaml")
    assert str(err.value) == ("configs/x.yaml: transmissions[3].packet_size: must be between "
                              "64 and 9000 bytes, got 70000")
    assert err.value.exit_code == 2


BAD = [
    # typos and unknown keys, at every level
    ({"transmissions.0.pakcet_size": 1400},
     r"transmissions\[0\]\.pakcet_size: unknown key 'pakcet_size' \(allowed: id, nic, size"),
    ({"hosts.h1.cpus": 4}, r"hosts\.h1\.cpus: unknown key 'cpus'"),
    ({"hosts.h1.costs.irqs": "4us"}, r"hosts\.h1\.costs\.irqs: unknown key 'irqs'"),
    ({"nics.n1.speed": "1Gbit/s"}, r"nics\.n1\.speed: unknown key 'speed'"),
    ({"transmissions.0.default.modde": "x"}, r"default\.modde: unknown key 'modde'"),
    ({"extra": 1}, r"extra: unknown key 'extra'"),
    # units
    ({"hosts.h1.costs.irq": "4parsecs"}, r"hosts\.h1\.costs\.irq: unknown unit 'parsecs'"),
    ({"transmissions.0.size": "big"}, r"transmissions\[0\]\.size: expected a size"),
    ({"transmissions.0.rate": "3600furlongs"}, r"transmissions\[0\]\.rate: unknown unit"),
    ({"nics.n1.link": "fast"}, r"nics\.n1\.link: expected a bit rate"),
    ({"hosts.h1.memory.bandwidth": "10GB"}, r"memory\.bandwidth: unknown unit 'GB'"),
    ({"hosts.h1.power.core_busy": "15V"}, r"power\.core_busy: unknown unit 'V'"),
    # ranges
    ({"transmissions.0.packet_size": 32},
     r"packet_size: must be between 64 and 9000 bytes, got 32"),
    ({"transmissions.0.size": 100}, r"size: must be between 1400 and .* bytes, got 100"),
    ({"hosts.h1.costs.irq": "2ms"}, r"costs\.irq: must be between 0 and 0\.001 s, got 0\.002"),
    ({"hosts.h1.cores": 0}, r"hosts\.h1\.cores: must be between 1 and 1024"),
    ({"hosts.h1.memory.traffic_per_byte": 9}, r"traffic_per_byte: must be between 1 and 8"),
    ({"nics.n1.ring_slots": 9000}, r"nics\.n1\.ring_slots: must be between 64 and 8192"),
    ({"nics.n1.min_ring_slots": 1}, r"nics\.n1\.min_ring_slots: must be between 2 and"),
    ({"nics.n1.irq_core": 4}, r"nics\.n1\.irq_core: must be between 0 and 3 \(host h1 has 4"),
    ({"nics.n1.link": "100kbit/s"}, r"nics\.n1\.link: must be between"),
    ({"transmissions.0.max_latency_p99": "2h"}, r"max_latency_p99: unknown unit 'h'"),
    # types and names
    ({"transmissions.0.packet_size": 1400.5}, r"packet_size: expected a whole number"),
    ({"hosts.h1.memory.traffic_per_byte": "lots"}, r"traffic_per_byte: expected a number"),
    ({"hosts.h1.cores": True}, r"cores: expected a whole number, got True"),
    # NaN passes every range comparison: refused before it reaches an engine
    ({"transmissions.0.size": float("nan")}, r"transmissions\[0\]\.size: must be a finite"),
    ({"transmissions.0.rate": float("nan")}, r"transmissions\[0\]\.rate: must be a finite"),
    ({"transmissions.0.start": float("inf")}, r"transmissions\[0\]\.start: must be a finite"),
    ({"hosts.h1.costs.irq": float("nan")}, r"hosts\.h1\.costs\.irq: must be a finite"),
    # (int() of them raised OverflowError, a traceback, or Python's own words)
    ({"hosts.h1.cores": float("inf")}, r"hosts\.h1\.cores: expected a finite whole number"),
    ({"transmissions.0.packet_size": float("-inf")},
     r"packet_size: expected a finite whole number, got -inf"),
    ({"nics.n1.max_ring_slots": float("inf")}, r"max_ring_slots: expected a finite whole number"),
    ({"transmissions.0.default.ring_slots": float("nan")},
     r"default\.ring_slots: expected a finite whole number, got nan"),
    ({"transmissions.0.default": {"mode": "passive_wait", "poll_interval": float("nan")}},
     r"default\.poll_interval: must be a finite"),
    ({"transmissions.0.id": "bad id!"}, r"transmissions\[0\]\.id: expected a name"),
    ({"transmissions.0.id": "a" * 65}, r"transmissions\[0\]\.id: expected a name of up to 64"),
    ({"hosts.h1.costs": [1, 2]}, r"hosts\.h1\.costs: expected a mapping"),
    ({"transmissions.0": "t1"}, r"transmissions\[0\]: expected a mapping, got str"),
    # required, references, choices
    ({"transmissions.0.packet_size": _DELETE}, r"transmissions\[0\]\.packet_size: is required"),
    ({"nics.n1.link": _DELETE}, r"nics\.n1\.link: is required"),
    ({"nics.n1.host": "h9"}, r"nics\.n1\.host: unknown host 'h9'"),
    ({"transmissions.0.nic": "n9"}, r"transmissions\[0\]\.nic: unknown nic 'n9'"),
    # (a list or mapping where a name goes was a TypeError: unhashable)
    ({"nics.n1.host": ["h1"]}, r"nics\.n1\.host: unknown host \['h1'\]"),
    ({"transmissions.0.nic": {"x": 1}}, r"transmissions\[0\]\.nic: unknown nic \{'x': 1\}"),
    # (`host: on` is YAML's True: it read "unknown host True")
    ({"nics.n1.host": True}, r"nics\.n1\.host: a name must be text \(quote yes, no, on"),
    ({"transmissions.0.nic": False}, r"transmissions\[0\]\.nic: a name must be text"),
    ({"nics.n1.host": None}, r"nics\.n1\.host: a name must be text .*got None"),
    ({"nics.n1.host": _DELETE}, r"nics\.n1\.host: is required"),
    ({"transmissions.0.nic": _DELETE}, r"transmissions\[0\]\.nic: is required"),
    ({"transmissions.0.arrival": "bursty"}, r"arrival: must be one of cbr, poisson, onoff"),
    ({"transmissions.0.onoff": {"on": "1ms"}}, r"onoff: is only used with arrival onoff"),
    ({"transmissions.1.onoff": {"on": "1ms", "of": "1ms"}}, r"onoff\.of: unknown key 'of'"),
    ({"transmissions.1.id": "t1"}, r"transmissions\[1\]\.id: duplicate id 't1'"),
    # (YAML 1.1 read `id: yes` as True: the transmission was named "True")
    ({"transmissions.0.id": True}, r"transmissions\[0\]\.id: a name must be text .* got True"),
    # (a whole float printed all its digits: 301 of them)
    ({"transmissions.0.rate": 1e300}, r"transmissions\[0\]\.rate: must be between .* got 1e\+300$"),
    ({"transmissions": []}, r"transmissions: is required and must not be empty"),
    ({"hosts": ["h1"]}, r"hosts: expected a mapping of host name"),
    ({"nics": ["n1"]}, r"nics: expected a mapping of NIC name"),
    ({"transmissions": {"t1": {}}}, r"transmissions: expected a list"),
    # settings
    ({"transmissions.0.default.mode": "turbo"}, r"default\.mode: must be one of active_wait"),
    ({"transmissions.0.default.watermark": 3000},
     r"default\.watermark: must be between 1 and 2048 packets \(half the ring\), got 3000"),
    ({"transmissions.0.default.watermark": _DELETE}, r"default\.watermark: is required"),
    # (a missing timeout silently meant none, which strands the last partial batch)
    ({"transmissions.0.default.watermark_timeout": _DELETE},
     r"default\.watermark_timeout: is required \(0 for none: the packets below the watermark"),
    ({"transmissions.0.default.ring_slots": 16},
     r"default\.ring_slots: must be between 64 and 8192 slots \(the NIC's ring limits\)"),
    ({"transmissions.0.default.irq_core": 7}, r"default\.irq_core: must be between 0 and 3"),
    ({"transmissions.0.default.placement": "far"}, r"default\.placement: must be one of"),
    ({"transmissions.0.default.poll_interval": "1ms"},
     r"default\.poll_interval: is not used by mode watermark"),
    ({"transmissions.0.default": {"mode": "passive_wait"}},
     r"default\.poll_interval: is required"),
    ({"transmissions.0.default": {"mode": "passive_wait", "poll_interval": "20s"}},
     r"default\.poll_interval: must be between 1e-06 and 10 s, got 20"),
    ({"transmissions.0.default.watermark_timeout": "-1s"},
     r"watermark_timeout: must be between 0 and 10 s"),
    # integers beyond float's range (an OverflowError traceback)
    ({"transmissions.0.size": 10 ** 400}, r"size: must be a finite number, got an integer of "
                                          r"401 digits"),
    ({"transmissions.0.default.watermark": 10 ** 400},
     r"default\.watermark: must be between 1 and 2048 .*got an integer of 401 digits"),
    ({"hosts.h1.memory": {"traffic_per_byte": 10 ** 400}}, r"traffic_per_byte: must be a finite"),
    # (a ZeroDivisionError in the DES)
    ({"hosts.h1.costs": {"per_packet": 0, "per_byte": 0}},
     r"hosts\.h1\.costs\.per_packet: per_packet and per_byte are both 0"),
]


@pytest.mark.parametrize(("changes", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_configs_are_refused_with_file_and_field(changes, message):
    with pytest.raises(ConfigError, match=r"^x\.yaml: " + ".*" + message):
        parse_config(doc(**changes), "x.yaml")


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"x\.yaml: \(top level\): expected a mapping"):
        parse_config([1, 2], "x.yaml")


def test_a_nic_has_one_default_setting():
    """t1 names n1's default and t2 (same NIC) none: t2 gets t1's, not PF_RING's (simulate
    gave it PF_RING's while optimize took t1's); two that differ name both."""
    cfg = parse_config(BASE, "x.yaml")
    t1, t2 = cfg.transmissions
    assert cfg.default_setting(t2) == cfg.default_setting(t1) == t1.default
    assert t1.default is not None and t1.default.watermark_timeout == 0.5
    raw = doc(**{"transmissions.1.default": {"mode": "active_wait", "ring_slots": 4096}})
    with pytest.raises(ConfigError, match=(
            r"^x\.yaml: transmissions\[1\]\.default: t2's default differs from t1's "
            r"\(transmissions\[0\]\) in mode, watermark, watermark_timeout, on the same nic "
            r"'n1'; a NIC has one setting at a time")):
        parse_config(raw, "x.yaml")
    same = doc(**{"transmissions.1.default": BASE["transmissions"][0]["default"]})
    assert parse_config(same).transmissions[1].default == t1.default


def test_unknown_transmission_is_named():
    with pytest.raises(ConfigError, match=r"no transmission 'nope' \(known: t1, t2\)$"):
        parse_config(BASE, "x.yaml").transmission("nope")  # (all known: no ", ...")


def test_unreadable_file_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: {h1: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML at line"):
        load_config(bad)
    # (Python reads no decimal integer of more than 4 300 digits: a ValueError traceback;
    # hex, octal and binary get past that limit: a traceback later, when a message printed
    # the value)
    for digits in ("9" * 5000, "0x" + "f" * 4000, "0b" + "1" * 15000, "0" + "7" * 5000):
        bad.write_text("hosts: {h1: {cores: " + digits + "}}\n")
        with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML at line 1: an "
                                              r"integer of more digits than can be read"):
            load_config(bad)
    # (any other ValueError of the loader is not a long integer)
    bad.write_text("hosts: {h1: {cores: 2020-02-30}}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML: day is out of range"):
        load_config(bad)


def test_a_profile_s_costs_are_part_of_the_config_hash(tmp_path):
    """The hash took the profile's path only: with ten times the costs in the file,
    `optimize --resume` accepted the checkpoint (a review's case)."""
    (tmp_path / "prof.yaml").write_text("costs: {per_byte: 1ns}\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc(**{"hosts.h1.profile": "prof.yaml"})))
    before = load_config(tmp_path / "c.yaml").digest
    assert load_config(tmp_path / "c.yaml").digest == before
    (tmp_path / "prof.yaml").write_text("costs: {per_byte: 10ns}\n")
    assert load_config(tmp_path / "c.yaml").digest != before


def test_host_profile_is_the_base_and_keys_override(tmp_path):
    (tmp_path / "prof.yaml").write_text(yaml.safe_dump(
        {"costs": {"irq": "7us", "per_byte": "1ns"}, "fit": {"r2": 0.9}}))
    raw = doc(**{"hosts.h1.profile": "prof.yaml"})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    h = load_config(tmp_path / "c.yaml").hosts["h1"]
    assert h.costs.irq == pytest.approx(5e-6)  # the config's key wins
    assert h.costs.per_byte == pytest.approx(1e-9)  # from the profile
    (tmp_path / "prof.yaml").write_text(yaml.safe_dump({"costs": {"irk": "7us"}}))
    with pytest.raises(ConfigError, match=r"prof\.yaml: costs\.irk: unknown key 'irk'"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc(**{"hosts.h1.profile": "nope.yaml"})))
    with pytest.raises(ConfigError, match=r"hosts\.h1\.profile: cannot read"):
        load_config(tmp_path / "c.yaml")
    # (a NUL byte in the name was a ValueError traceback)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc(**{"hosts.h1.profile": "a\0b"})))
    with pytest.raises(ConfigError, match=r"hosts\.h1\.profile: cannot read .*not a file name"):
        load_config(tmp_path / "c.yaml")


def test_errors_in_a_profile_name_the_profile_file(tmp_path):
    """(They were reported against the config that names the profile, where no such
    value is written.)"""
    profile = re.escape(str(tmp_path / "prof.yaml"))
    (tmp_path / "prof.yaml").write_text(yaml.safe_dump({"costs": {"per_byte": "fast"},
                                                        "memory": {"bandwidth": "1kB/s"}}))
    raw = doc(**{"hosts.h1.profile": "prof.yaml", "hosts.h1.memory.bandwidth": _DELETE})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"^{profile}: costs\.per_byte: expected a duration"):
        load_config(tmp_path / "c.yaml")
    raw["hosts"]["h1"]["costs"]["per_byte"] = "1ns"  # the config overrides the bad value
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"^{profile}: memory\.bandwidth: must be between"):
        load_config(tmp_path / "c.yaml")
    raw["hosts"]["h1"]["memory"]["bandwidth"] = "1kB/s"  # now the config's own value
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"c\.yaml: hosts\.h1\.memory\.bandwidth: must be"):
        load_config(tmp_path / "c.yaml")


def test_parse_setting_accepts_human_units():
    cfg = parse_config(BASE)
    s = parse_setting({"mode": "passive_wait", "poll_interval": "50us"}, cfg.nics["n1"],
                      cfg.hosts["h1"], "--options", "")
    assert s.poll_interval == pytest.approx(50e-6) and s.ring_slots == 2048 and s.irq_core == 1


def test_paper_47_matches_the_measured_data(repo, shared):
    cfg = load_config(repo / "configs" / "paper-47.yaml")
    with open(shared / "data" / "paper_47_transmissions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(cfg.transmissions) == len(rows) == 47
    hosts = {cfg.nic_of(t).host for t in cfg.transmissions}
    assert len(hosts) == 47  # each on its own node, as in the paper
    for t, row in zip(cfg.transmissions, rows, strict=True):
        assert t.packet_size == int(row["packet_size_bytes"])
        assert t.size == pytest.approx(float(row["transmission_size_gb"]) * 1e9)
        mbps = float(row["default_throughput_mbps"])
        assert t.rate * t.packet_size * 8 == pytest.approx(mbps * 1e6, rel=1e-3)
        assert cfg.default_setting(t) == pfring_default(cfg.nic_of(t))


def test_numeric_host_and_nic_names_resolve_and_collide():
    """YAML reads `host: 1` as a number and the key `1:` is named "1": the two meet (the
    error said `unknown host 1 (hosts: 1)`), and `1:` beside `'1':` is one name twice (the
    second silently won)."""
    raw = copy.deepcopy(BASE)
    raw["hosts"] = {1: raw["hosts"]["h1"]}
    raw["nics"] = {2: {**raw["nics"]["n1"], "host": 1}}
    for t in raw["transmissions"]:
        t["nic"] = 2
    cfg = parse_config(raw, "x.yaml")
    assert cfg.nic_of(cfg.transmissions[0]).host == "1" and "2" in cfg.nics
    raw["hosts"]["1"] = {"cores": 8}
    with pytest.raises(ConfigError, match=r"^x\.yaml: hosts: '1' is given twice$"):
        parse_config(raw, "x.yaml")


def test_yaml_merge_keys_are_read_and_a_mappings_own_keys_still_unique(tmp_path):
    """`<<: *anchor` was refused as "could not determine a constructor" (the duplicate-key
    check read the merge key as a key); a key the mapping repeats is still refused, and one
    it shares with the anchor overrides it, as YAML says."""
    (tmp_path / "c.yaml").write_text(
        "hosts: {h: {cores: 2}}\nnics: {n1: {host: h, link: 10Gbit/s}}\ntransmissions:\n"
        "  - &t {id: t1, nic: n1, size: 1MB, packet_size: 1000, rate: 10kpps}\n"
        "  - {<<: *t, id: t2, packet_size: 500}\n")
    t1, t2 = load_config(tmp_path / "c.yaml").transmissions
    assert (t2.id, t2.packet_size, t2.rate) == ("t2", 500, t1.rate)
    (tmp_path / "c.yaml").write_text(
        (tmp_path / "c.yaml").read_text().replace("packet_size: 500}", "id: t3}"))
    with pytest.raises(ConfigError, match="duplicate key 'id'"):
        load_config(tmp_path / "c.yaml")


def test_a_host_named_on_must_be_quoted(tmp_path):
    """YAML 1.1 reads `on:` as True: the host was named "True" and its NICs' `host: on`
    pointed at it by accident."""
    (tmp_path / "c.yaml").write_text(
        "hosts: {on: {cores: 2}}\nnics: {n1: {host: 'on', link: 10Gbit/s}}\n"
        "transmissions: [{id: t, nic: n1, size: 1MB, packet_size: 1000, rate: 1kpps}]\n")
    with pytest.raises(ConfigError, match=r"hosts: a name must be text .* got True"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text(
        (tmp_path / "c.yaml").read_text().replace("{on:", "{'on':"))
    assert list(load_config(tmp_path / "c.yaml").hosts) == ["on"]


def test_config_oddities_a_review_found() -> None:
    """`on` given bare and quoted in onoff: the last one won silently; one default written
    as 100us and 0.1ms: refused as two (the products differ in the last bit); a host named
    1.5: "unknown host 1.5 (hosts: 1.5)"."""
    onoff = doc(**{"transmissions.1.arrival": "onoff"})
    onoff["transmissions"][1]["onoff"] = {True: "1ms", "on": "50ms", "off": "10ms"}
    with pytest.raises(ConfigError, match=r"transmissions\[1\]\.onoff: 'on' is given twice"):
        parse_config(onoff)
    same = doc(**{"transmissions.0.nic": "n1", "transmissions.1.nic": "n1"})
    same["transmissions"][0]["default"] = {"mode": "passive_wait", "poll_interval": "100us"}
    same["transmissions"][1]["default"] = {"mode": "passive_wait", "poll_interval": "0.1ms"}
    cfg = parse_config(same)
    assert cfg.default_setting(cfg.transmissions[1]).poll_interval == pytest.approx(1e-4)
    named = doc()
    named["hosts"] = {1.5: named["hosts"]["h1"]}
    named["nics"]["n1"]["host"] = 1.5
    assert parse_config(named).nics["n1"].host == "1.5"
