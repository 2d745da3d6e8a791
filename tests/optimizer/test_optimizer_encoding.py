"""Every gene vector decodes to a valid setting; the defaults decode exactly."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nictune.model import parse_config
from nictune.optimizer.encoding import GENES_PER_NIC, Encoding
from nictune.plan import _check_setting


@st.composite
def configs(draw: Any) -> dict[str, Any]:
    """Two hosts, one with two NICs (shared), odd ring limits and any default setting."""
    nics, transmissions = {}, []
    for i in range(3):
        low = draw(st.integers(2, 5000))  # the smallest ring a config may give
        high = draw(st.integers(low, 40000))
        ring = draw(st.integers(low, high))
        mode = draw(st.sampled_from(["active_wait", "passive_wait", "watermark", "busy_poll"]))
        default: dict[str, Any] = {"mode": mode, "ring_slots": ring}
        if mode == "passive_wait":
            default["poll_interval"] = draw(st.floats(1e-6, 10.0))
        if mode == "watermark":
            default["watermark"] = draw(st.integers(1, ring // 2))
            default["watermark_timeout"] = draw(st.one_of(st.just(0.0), st.floats(1e-7, 10.0)))
        nics[f"n{i}"] = {"host": "a" if i < 2 else "b", "link": "10Gbit/s",
                         "min_ring_slots": low, "max_ring_slots": high, "ring_slots": ring}
        transmissions.append({"id": f"t{i}", "nic": f"n{i}", "size": "1MB",
                              "packet_size": 1000, "rate": "1000pps", "default": default})
    return {"hosts": {"a": {"cores": 3}, "b": {"cores": 2}}, "nics": nics,
            "transmissions": transmissions}


def _valid(config: Any, genes: list[float]) -> None:
    enc = Encoding(config)
    for t, s in zip(config.transmissions, enc.settings(genes), strict=True):
        nic = config.nics[t.nic]
        assert _check_setting(s.to_json(), "setting") == s
        assert nic.min_ring_slots <= s.ring_slots <= nic.max_ring_slots
        assert 0 <= s.irq_core < config.hosts[nic.host].cores
        if s.mode == "watermark":
            assert 1 <= s.watermark <= s.ring_slots // 2
        if s.mode == "passive_wait":
            assert 1e-6 <= s.poll_interval <= 10.0


@settings(max_examples=150, deadline=None)
@given(configs(), st.lists(st.floats(0.0, 1.0), min_size=3 * GENES_PER_NIC,
                           max_size=3 * GENES_PER_NIC))
def test_optimizer_any_genes_decode_to_a_valid_setting(raw: dict[str, Any],
                                                       genes: list[float]) -> None:
    _valid(parse_config(raw), genes)


@settings(max_examples=100, deadline=None)
@given(configs())
def test_optimizer_default_genes_decode_to_the_defaults(raw: dict[str, Any]) -> None:
    config = parse_config(raw)
    enc = Encoding(config)
    assert enc.settings(enc.default_genes()) == [config.default_setting(t)
                                                 for t in config.transmissions]
    _valid(config, enc.default_genes())


def test_optimizer_extreme_genes_reach_the_range_ends(repo: Any) -> None:
    from nictune.model import load_config

    config = load_config(repo / "configs" / "paper-47.yaml")
    enc = Encoding(config)
    top = enc.settings([0.5, 0.999, 0.999, 0.999, 0.999, 0.0, 0.0] * len(enc.spaces))[0]
    assert (top.mode, top.ring_slots, top.watermark, top.watermark_timeout) == (
        "watermark", 32768, 16384, 1.0)
    low = enc.settings([0.3, 0.001, 0, 0, 0.001, 0, 0] * len(enc.spaces))[0]
    assert (low.mode, low.poll_interval, low.ring_slots) == ("passive_wait", 10e-6, 64)
    assert len(enc.hosts) == 47 and not any(s.shared for s in enc.spaces)
