"""Human units parse to SI, and bad units are refused with a reason."""

import pytest

from nictune.units import (
    format_duration,
    format_size,
    parse_bitrate,
    parse_byterate,
    parse_duration,
    parse_power,
    parse_rate,
    parse_size,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("7.5GB", 7.5e9), ("1GiB", 2**30), ("1500B", 1500), ("64KiB", 65536), (1500, 1500),
    ("2 MB", 2e6),
])
def test_sizes(text, expected):
    assert parse_size(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("500ms", 0.5), ("20us", 20e-6), ("20µs", 20e-6), ("250ns", 250e-9), ("2min", 120),
    (0.001, 0.001),
])
def test_durations(text, expected):
    assert parse_duration(text) == pytest.approx(expected)


def test_rates_bits_bytes_power():
    assert parse_bitrate("10Gbit/s") == pytest.approx(1e10)
    assert parse_bitrate("100Mbps") == pytest.approx(1e8)
    assert parse_byterate("20GB/s") == pytest.approx(2e10)
    assert parse_power("500mW") == pytest.approx(0.5)


def test_packet_rate_from_bits_uses_packet_size():
    assert parse_rate("3600pps", 1400) == pytest.approx(3600)
    assert parse_rate("1.5Mpps", 64) == pytest.approx(1.5e6)
    assert parse_rate("40Mbit/s", 1000) == pytest.approx(5000)


@pytest.mark.parametrize(("parse", "bad", "reason"), [
    (parse_size, "7.5 parsecs", "unknown unit"),
    (parse_duration, "fast", "expected a duration"),
    (parse_duration, True, "expected a duration"),
    (parse_bitrate, "10GB", "unknown unit"),
    (parse_size, [1], "expected a size"),
])
def test_bad_units_name_the_problem(parse, bad, reason):
    with pytest.raises(ValueError, match=reason):
        parse(bad)


def test_bad_packet_rate_unit():
    with pytest.raises(ValueError, match="unknown unit 'GB'"):
        parse_rate("3GB", 1000)


def test_onoff_keys_unquoted_in_yaml(tmp_path):
    """`onoff: {on: 5ms, off: 20ms}` as documented, although YAML 1.1 reads on/off as bools."""
    from nictune.model import load_config

    path = tmp_path / "c.yaml"
    path.write_text(
        "hosts: {h: {}}\nnics: {n: {host: h, link: 1Gbit/s}}\n"
        "transmissions:\n  - {id: t, nic: n, size: 1MB, packet_size: 1000, rate: 1000pps,\n"
        "     arrival: onoff, onoff: {on: 5ms, off: 20ms}}\n")
    t = load_config(path).transmissions[0]
    assert (t.onoff_on, t.onoff_off) == pytest.approx((0.005, 0.020))


@pytest.mark.parametrize(("value", "text"), [
    (0.5, "500 ms"), (20e-6, "20 us"), (250e-9, "250 ns"), (0.0, "0 ns"), (2.5, "2.5 s"),
    # the unit is chosen after rounding: these printed as `1e+03 ms`, `1e+03 us`
    (0.9999, "1 s"), (999.96e-6, "1 ms"), (0.99949, "999 ms"),
])
def test_format_duration(value, text):
    assert format_duration(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (7.5e9, "7.5 GB"), (64, "64 B"), (999.9e6, "1 GB"), (999.6, "1 kB"),
])
def test_format_size(value, text):
    assert format_size(value) == text
