"""The plan file round-trips and a bad plan is refused with a one-line message."""

import copy
import dataclasses
import errno
import os

import pytest
import yaml

from nictune.model import NicSetting
from nictune.plan import Plan, PlanEntry, PlanError, load_plan, parse_plan, plan_document, save_plan

WATERMARK = NicSetting(mode="watermark", watermark=64, watermark_timeout=0.01, ring_slots=2048)
DEFAULT = NicSetting(mode="watermark", watermark=128, watermark_timeout=0.5, ring_slots=4096)


def _plan() -> Plan:
    return Plan(
        entries=[
            PlanEntry(id="t1", host="rx1", nic="nic-1", setting=WATERMARK,
                      default_setting=DEFAULT, packet_size=1400, rate_pps=3600,
                      predicted={"default": {"throughput_bps": 1.0}}),
            PlanEntry(id="t2", host="rx2", nic="nic-2",
                      setting=NicSetting(mode="passive_wait", poll_interval=1e-4),
                      default_setting=DEFAULT, flags=("engines_disagree: 6%",)),
        ],
        config="configs/x.yaml", config_hash="sha256:00", seed=7, meta={"engine": "fast"},
    )


def test_round_trip(tmp_path):
    path = tmp_path / "plan.yaml"
    save_plan(_plan(), path)
    loaded = load_plan(path)
    assert [e.setting for e in loaded.entries] == [WATERMARK, _plan().entries[1].setting]
    assert loaded.entries[1].flags == ("engines_disagree: 6%",)
    assert loaded.seed == 7 and loaded.meta["engine"] == "fast"
    assert loaded.nic_settings()[("rx1", "nic-1")] == WATERMARK


def test_a_pyyaml_without_libyaml_writes_the_same_plan(tmp_path, monkeypatch):
    """save_plan takes libyaml's emitter where PyYAML was built with it; without it the
    pure-Python one writes a plan that loads the same (a long flag, non-ASCII names)."""
    plan = dataclasses.replace(_plan(), meta={"engine": "fast", "note": "größe " * 40})
    with_c, without = tmp_path / "c.yaml", tmp_path / "py.yaml"
    save_plan(plan, with_c)
    monkeypatch.delattr(yaml, "CSafeDumper", raising=False)
    save_plan(plan, without)
    assert plan_document(load_plan(with_c)) == plan_document(load_plan(without)) == \
        plan_document(plan)


def test_a_plan_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A disk that fills half-way through leaves the previous plan, not a cut one (a
    YAML plan cut short often still parses, with transmissions missing)."""
    path = tmp_path / "plan.yaml"
    save_plan(_plan(), path)
    before = path.read_text()
    def full_disk(_fd):  # the data reached the file; the disk filled on the flush
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        save_plan(dataclasses.replace(_plan(), seed=8), path)
    assert path.read_text() == before and load_plan(path).seed == 7
    assert [f.name for f in tmp_path.iterdir()] == ["plan.yaml"]  # no temporary left


def _doc() -> dict:
    return copy.deepcopy(plan_document(_plan()))


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["transmissions"][0].update(host="rx1; reboot"), r"transmissions\[0\]\.host"),
    (lambda d: d["transmissions"][0].update(nic="$(id)"), r"transmissions\[0\]\.nic"),
    (lambda d: d["transmissions"][0]["setting"].update(mode="turbo"), "mode: must be one of"),
    (lambda d: d["transmissions"][0]["setting"].update(watermark=4096),
     r"watermark: must be a whole number between 1 and 1024"),
    (lambda d: d["transmissions"][0]["setting"].update(ring_slots="4096"), "ring_slots"),
    # (it read "watermark: must be a whole number between 1 and 0")
    (lambda d: d["transmissions"][0]["setting"].update(ring_slots=1),
     "ring_slots: a watermark needs a ring of at least 2 slots"),
    (lambda d: d["transmissions"][1]["setting"].update(watermark=3), "not used by mode"),
    (lambda d: d["transmissions"][1]["setting"].update(poll_interval_s=-1), "poll_interval_s"),
    (lambda d: d["transmissions"][0].update(colour="red"), "colour: unknown key"),
    (lambda d: d["transmissions"].append(dict(d["transmissions"][0])), "duplicate id"),
    (lambda d: d.update(nictune_plan=99), "nictune_plan: expected format 1"),
    (lambda d: d.update(transmissions=[]), "non-empty list"),
])
def test_bad_plans_are_refused(mutate, message):
    doc = _doc()
    mutate(doc)
    with pytest.raises(PlanError, match=message):
        parse_plan(doc, "p.yaml")


def test_two_settings_for_one_nic_are_refused():
    doc = _doc()
    doc["transmissions"][1].update(host="rx1", nic="nic-1")
    with pytest.raises(PlanError, match="different settings; a NIC has one"):
        parse_plan(doc, "p.yaml")


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(PlanError, match="cannot read"):
        load_plan(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("transmissions: [\n")
    with pytest.raises(PlanError, match="invalid YAML"):
        load_plan(bad)
    bad.write_text(yaml.safe_dump(["a"]))
    with pytest.raises(PlanError, match="expected a mapping"):
        load_plan(bad)
