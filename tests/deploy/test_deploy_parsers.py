"""The parsers read every real ethtool / /proc/interrupts output in ethtool-samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from nictune.deploy import parsers

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ethtool-samples"
# (none found: one case that fails on the `shared` fixture's message, not a silent skip)
NAMES = sorted(p.name for p in SAMPLES.glob("*.txt")) or ["(no ethtool-samples)"]
PARSE = {
    "ethtool-c": parsers.parse_coalesce, "ethtool-g": parsers.parse_ring,
    "ethtool-l": parsers.parse_channels, "ethtool-k": parsers.parse_features,
    "ethtool-i": parsers.parse_driver_info, "ethtool-json-g": parsers.parse_json_ring,
    "ethtool-json-k": parsers.parse_json_features,
    "proc-interrupts": parsers.parse_interrupts,
}


def sample(shared: Path, name: str) -> str:
    return (shared / "data" / "ethtool-samples" / name).read_text()


@pytest.mark.parametrize("name", NAMES)
def test_every_sample_parses(shared: Path, name: str) -> None:
    command = name.split("__")[1]
    text = sample(shared, name)
    # pasted outputs are often cut: the JSON ones are read up to their last whole member
    # (a live probe's never are)
    result = PARSE[command](text, repair=True) if "json" in command else PARSE[command](text)
    if parsers.unsupported(text):
        assert result is None or result == {}
    else:
        assert result, f"{name} parsed to nothing"


def test_sample_set_is_complete(shared: Path) -> None:
    names = {p.name for p in (shared / "data" / "ethtool-samples").glob("*.txt")}
    assert len(names) >= 40 and {n.split("__")[1] for n in names} == set(PARSE)


def test_annotated_e1000e_ring_ignores_the_pasted_comment(shared: Path) -> None:
    ring = parsers.parse_ring(sample(shared, "e1000e__ethtool-g__1.txt"))
    assert ring is not None
    assert ring["current"]["rx"] == 256 and ring["max"]["rx"] == 4096
    assert ring["current"]["tx-push"] is False and ring["current"]["rx-mini"] is None


def test_partial_json_features_is_repaired_only_when_asked(shared: Path) -> None:
    text = sample(shared, "unknown__ethtool-json-k__1.txt")
    with pytest.raises(parsers.ParseError, match="not whole JSON"):
        parsers.parse_json_features(text)
    feats = parsers.parse_json_features(text, repair=True)
    assert feats["rx-checksumming"] == {"active": False, "fixed": True, "requested": False}
    assert feats["tx-checksumming"]["requested"] is None
    assert "tx-scatter-gather" in feats


def test_partial_ring_has_only_maximums(shared: Path) -> None:
    ring = parsers.parse_ring(sample(shared, "r8169__ethtool-g__1.txt"))
    assert ring == {"max": {"rx": 255, "rx-mini": None, "rx-jumbo": None, "tx": 255,
                            "tx-push-buff-len": None}, "current": {}}


@pytest.mark.parametrize("name", ["veth__ethtool-c__1.txt", "veth__ethtool-g__1.txt",
                                  "r8169__ethtool-l__1.txt", "netxen_nic__ethtool-l__1.txt"])
def test_unsupported_wordings(shared: Path, name: str) -> None:
    text = sample(shared, name)
    assert parsers.unsupported(text)
    assert PARSE[name.split("__")[1]](text) is None


def test_coalesce_layouts(shared: Path) -> None:
    mlx = parsers.parse_coalesce(sample(shared, "mlx5_core__ethtool-c__1.txt"))
    assert mlx is not None
    assert (mlx["adaptive-rx"], mlx["rx-usecs"], mlx["rx-frames"]) == (True, 8, 128)
    assert (mlx["cqe-mode-rx"], mlx["cqe-mode-tx"]) == (True, False)
    assert mlx["rx-usecs-irq"] is None
    tabbed = parsers.parse_coalesce(sample(shared, "unknown__ethtool-c__1.txt"))
    assert tabbed is not None
    assert tabbed["rx-usecs"] == 3 and tabbed["rx-frames"] is None
    assert tabbed["adaptive-rx"] is None
    old = parsers.parse_coalesce(sample(shared, "i40e__ethtool-c__1.txt"))
    assert old is not None and old["rx-frames-irq"] == 256 and old["adaptive-rx"] is True


def test_channels_old_and_netlink(shared: Path) -> None:
    old = parsers.parse_channels(sample(shared, "hv_netvsc__ethtool-l__1.txt"))
    new = parsers.parse_channels(sample(shared, "hv_netvsc__ethtool-l__2.txt"))
    veth = parsers.parse_channels(sample(shared, "veth__ethtool-l__1.txt"))
    assert old and new and veth
    assert old["current"] == {"rx": 0, "tx": 0, "other": 0, "combined": 8}
    assert new["current"]["combined"] == 2 and new["current"]["rx"] is None
    assert veth["max"]["rx"] == 2 and veth["current"]["rx"] == 1


def test_features_text(shared: Path) -> None:
    feats = parsers.parse_features(sample(shared, "hv_netvsc__ethtool-k__1.txt"))
    assert feats is not None
    assert feats["generic-receive-offload"] == {"active": True, "fixed": False,
                                                "requested": True}
    assert feats["highdma"]["fixed"] is True
    assert feats["tx-checksum-ipv4"]["active"] is True  # indented sub-feature
    assert parsers.parse_features("Features for x:\nrx-gro-list: off [requested on]\n") == {
        "rx-gro-list": {"active": False, "fixed": False, "requested": True}}


def test_json_ring(shared: Path) -> None:
    ring = parsers.parse_json_ring(sample(shared, "unknown__ethtool-json-g__1.txt"))
    assert ring["max"] == {"rx": 8192, "tx": 8192} and ring["current"]["rx"] == 1024


def test_driver_info(shared: Path) -> None:
    hv = parsers.parse_driver_info(sample(shared, "hv_netvsc__ethtool-i__1.txt"))
    assert hv["driver"] == "hv_netvsc" and hv["bus-info"] == ""
    assert hv["version"] == "5.10.102.1-microsoft-standard-W"
    with pytest.raises(parsers.ParseError):
        parsers.parse_driver_info("garbage")


def irq_names(lines: list[parsers.IrqLine]) -> list[str]:
    return [x.name for x in lines]


def test_interrupts_by_driver_naming(shared: Path) -> None:
    i40e = parsers.parse_interrupts(sample(shared, "i40e__proc-interrupts__1.txt"))
    assert len(i40e[0].counts) == 4
    assert next(x for x in i40e if x.irq == 7).name == ""  # empty action name
    eth0 = irq_names(parsers.irqs_of(i40e, "eth0", bus_info="0000:01:00.0"))
    assert "i40e-eth0-TxRx-3" in eth0 and "i40e-0000:01:00.0:misc" in eth0
    assert "eth2" not in eth0 and "i40e-0000:01:00.1:misc" not in eth0
    assert irq_names(parsers.irqs_of(i40e, "eth2")) == ["eth2"]
    igb = parsers.parse_interrupts(sample(shared, "igb__proc-interrupts__1.txt"))
    eth1 = irq_names(parsers.irqs_of(igb, "eth1"))
    assert "eth1" in eth1 and "eth1-rx-3" in eth1 and "eth1-tx-0" in eth1
    assert not any(n.startswith("eth10") for n in eth1)
    ixgbe = parsers.parse_interrupts(sample(shared, "ixgbe__proc-interrupts__1.txt"))
    assert len(ixgbe[0].counts) == 12
    assert len(parsers.irqs_of(ixgbe, "eth0")) == 9  # eth0 + eth0-TxRx-0..7


def test_interrupts_modern_formats(shared: Path) -> None:
    mlx = parsers.parse_interrupts(sample(shared, "mlx5_core__proc-interrupts__1.txt"))
    assert len(mlx) == 15 and len(mlx[0].counts) == 12  # no header line
    assert mlx[0].chip == "IR-PCI-MSIX-0000:01:00.0 0-edge"
    port0 = parsers.irqs_of(mlx, "enp1s0f0np0", bus_info="0000:01:00.0")
    assert len(port0) == 13 and all("0000:01:00.0" in x.name for x in port0)
    old = parsers.parse_interrupts(sample(shared, "mlx5_core__proc-interrupts__2.txt"))
    assert len(parsers.irqs_of(old, "eth2", bus_info="0000:01:00.1")) == 7
    virtio = parsers.parse_interrupts(sample(shared, "virtio_net__proc-interrupts__1.txt"))
    assert irq_names(parsers.irqs_of(virtio, "eth0", device="virtio0")) == [
        "virtio0-config", "virtio0-input.0", "virtio0-output.0"]
    shared_line = next(x for x in virtio if x.irq == 11)
    assert shared_line.actions == ["uhci_hcd:usb1", "virtio3"]


def test_interrupts_of_an_arm64_gic() -> None:
    """arm64 prints the GIC's hwirq and trigger as two columns ("ITS-MSI 16385 Edge"):
    both belong to the chip, or the handler name starts with them and no NIC matches."""
    text = ("           CPU0       CPU1\n"
            " 11:      70563      67210     GICv3  27 Level     arch_timer\n"
            " 45:      13862          0   ITS-MSI 16385 Edge      virtio0-input.0\n"
            " 52:       9876          0   ITS-MSI 81921 Edge      eth1-TxRx-0\n"
            " 60:          0          0   ITS-MSI Edge      eth1-TxRx-1\n")
    lines = parsers.parse_interrupts(text)
    assert [(x.chip, x.name) for x in lines] == [
        ("GICv3 27 Level", "arch_timer"), ("ITS-MSI 16385 Edge", "virtio0-input.0"),
        ("ITS-MSI 81921 Edge", "eth1-TxRx-0"), ("ITS-MSI Edge", "eth1-TxRx-1")]
    assert irq_names(parsers.irqs_of(lines, "eth0", device="virtio0")) == ["virtio0-input.0"]
    assert [x.irq for x in parsers.irqs_of(lines, "eth1")] == [52, 60]


def test_masks() -> None:
    assert parsers.cpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert parsers.hex_mask("00000000,00000002") == 2


def test_newer_ethtool_json_commands() -> None:
    # ethtool >= 6.2 prints -c and -l as JSON (keys omitted when unsupported)
    channels = parsers.parse_json_channels(
        '[ {"ifname": "eth0", "rx-max": 2, "tx-max": 2, "rx": 1, "tx": 1} ]')
    assert channels == {"max": {"rx": 2, "tx": 2}, "current": {"rx": 1, "tx": 1}}
    coalesce = parsers.parse_json_coalesce(
        '[ {"ifname": "eth0", "adaptive-rx": false, "rx-usecs": 8, "rx-frames": 128} ]')
    assert coalesce == {"adaptive-rx": False, "rx-usecs": 8, "rx-frames": 128}
    with pytest.raises(parsers.ParseError):
        parsers.load_json("ethtool: bad command line argument(s)")


GARBLED = [
    # numbers ethtool never prints: a restore would write them back (`ethtool -G IF rx -1`)
    (lambda: parsers.parse_ring("Pre-set maximums:\nRX:\t4096\nCurrent hardware settings:\n"
                                "RX:\t-1\n"), "negative"),
    (lambda: parsers.parse_coalesce("rx-usecs: 99999999999999999999\n"), "beyond 32 bits"),
    # a word where nictune's knob is: garbled, not "n/a" (deploy said the NIC lacked it)
    (lambda: parsers.parse_coalesce("Coalesce parameters for eth0:\nrx-usecs: banana\n"),
     "rx-usecs: expected a count or n/a"),
    # --json values of the wrong type (NaN, floats, strings for booleans, booleans for counts)
    (lambda: parsers.parse_json_coalesce('[{"rx-usecs": NaN}]'), "rx-usecs"),
    (lambda: parsers.parse_json_coalesce('[{"rx-frames": 1.5}]'), "rx-frames"),
    (lambda: parsers.parse_json_coalesce('[{"adaptive-rx": 1}]'), "adaptive-rx"),
    (lambda: parsers.parse_json_channels('[{"combined": true, "combined-max": 8}]'),
     "combined"),
    (lambda: parsers.parse_json_features(
        '[{"rx-gro-hw": {"active": "false", "fixed": false, "requested": false}}]'),
     "true/false"),
    # CPU lists and masks: garbage, and ranges past any kernel's CPUs (a 0-4294967295 list
    # was expanded number by number)
    (lambda: parsers.cpu_list("abc"), "CPU list"),
    (lambda: parsers.cpu_list("1-"), "CPU list"),
    (lambda: parsers.cpu_list("0-4294967295"), "CPU list"),
    (lambda: parsers.cpu_list("5-2"), "CPU list"),
    (lambda: parsers.cpu_list("1,,2"), "CPU list"),
    (lambda: parsers.cpu_list(""), "CPU list"),
    (lambda: parsers.hex_mask("n/a"), "CPU mask"),
]


@pytest.mark.parametrize(("parse", "message"), GARBLED)
def test_garbled_remote_values_are_parse_errors(parse, message: str) -> None:
    """Found by a fuzz run: each was taken as state, or raised a ValueError/TypeError that
    escaped the transaction's restore."""
    with pytest.raises(parsers.ParseError, match=message):
        parse()


def test_only_ascii_digits_count() -> None:
    assert parsers.is_count("98") and not parsers.is_count("\u00b2")
    assert parsers.cpu_list("0-3,6") == [0, 1, 2, 3, 6]


def test_driver_info_with_an_unsupported_field_keeps_the_driver() -> None:
    info = parsers.parse_driver_info("driver: ixgbe\nversion: 1\nfirmware-version: not "
                                     "supported\nbus-info: 0000:01:00.0\n")
    assert info["driver"] == "ixgbe" and info["bus-info"] == "0000:01:00.0"
    assert parsers.parse_driver_info("Cannot get driver information: Operation not "
                                     "supported\n") == {}
