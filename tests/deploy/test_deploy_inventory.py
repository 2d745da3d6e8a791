"""Bad inventories and plans are refused with exit code 2 before any connection."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from nictune.cli import main
from nictune.deploy.inventory import InventoryError, check_plan_nics, load_inventory

# (an inventory's key_file must look like a private key; no connection reads this one)
# a real key (the inventory loads it) that no host trusts
FAKE_KEY = Ed25519PrivateKey.generate().private_bytes(
    Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()

PLAN = {"nictune_plan": 1, "transmissions": [
    {"id": "t1", "host": "rx1", "nic": "nic-1",
     "setting": {"mode": "active_wait", "ring_slots": 1024}}]}
ROOT = Path(__file__).resolve().parents[2]


def write_inventory(tmp: Path, host: dict | None = None, **top: object) -> Path:
    (tmp / "id_ed25519").write_text(FAKE_KEY)
    entry = {"address": "192.0.2.1", "nics": {"nic-1": "eth1"}, **(host or {})}
    doc = {"defaults": {"key_file": "id_ed25519", "known_hosts": "known_hosts"},
           "hosts": {"rx1": entry}, **top}
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def write_plan(tmp: Path, doc: dict | None = None) -> Path:
    path = tmp / "plan.yaml"
    path.write_text(yaml.safe_dump(doc or PLAN))
    return path


def test_valid_inventory_resolves_paths(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path, {"port": 2222, "sudo": True,
                                                    "root": "/srv/lab"}))
    host = inv.hosts["rx1"]
    assert host.key_file == tmp_path / "id_ed25519"
    assert host.known_hosts == tmp_path / "known_hosts"
    assert host.state_dir == tmp_path / ".nictune"
    assert (host.port, host.sudo, host.user) == (2222, True, "root")
    assert host.remote_path("/etc/x") == "/srv/lab/etc/x"
    assert inv.select(None) == [host]


@pytest.mark.parametrize("address", ["fe80::1%eth0", "fe80::1%3", "192.0.2.7", "rx1.lab."])
def test_addresses_with_and_without_an_ipv6_zone(tmp_path: Path, address: str) -> None:
    assert load_inventory(write_inventory(tmp_path, {"address": address})).hosts[
        "rx1"].address == address


@pytest.mark.parametrize("host, field", [
    ({"nics": {"nic-1": "eth0; reboot"}}, "nics.nic-1"),
    ({"nics": {"nic-1": "$(reboot)"}}, "nics.nic-1"),
    ({"nics": {"nic-1": "-eth0"}}, "nics.nic-1"),
    ({"nics": {"nic-1": "averyveryverylongname"}}, "nics.nic-1"),
    ({"nics": {"nic-1": "eth0:1"}}, "nics.nic-1"),  # (an address label, not a device)
    ({"nics": {"bad id!": "eth0"}}, "nics"),
    ({"nics": {"a": "eth0", "b": "eth0"}}, "nics"),
    ({"address": "10.0.0.1; reboot"}, "address"),
    # (ipaddress takes anything as an IPv6 zone: these were addresses, and the second one
    # printed as two forged result lines)
    ({"address": "fe80::1%$(id);x"}, "address"),
    ({"address": "fe80::1%x\nrx1: applied"}, "address"),
    ({"address": 12}, "address"),
    ({"port": "22"}, "port"),
    ({"port": 70000}, "port"),
    ({"sudo": "yes"}, "sudo"),
    ({"user": "root; id"}, "user"),
    ({"key_file": "missing_key"}, "key_file"),
    ({"known_hosts": "nodir/known_hosts"}, "known_hosts"),
    ({"known_hosts": "."}, "known_hosts"),  # (a directory: "unknown host key" at connect)
    ({"root": "relative/path"}, "root"),
    ({"root": "/a/../etc"}, "root"),
    ({"netns": "ns; id"}, "netns"),
    ({"colour": "blue"}, "colour"),
    # `$` matched before a trailing newline: these reached the host or the state directory
    ({"nics": {"nic-1": "eth0\n"}}, "nics.nic-1"),
    ({"user": "root\n"}, "user"),
    ({"root": "/srv/lab\n"}, "root"),
    ({"key_file": "k" * 300}, "key_file"),  # (ENAMETOOLONG was a traceback)
    ({"key_file": "~nosuchuser-nictune/key"}, "key_file"),  # (RuntimeError was a traceback)
    ({"known_hosts": "~nosuchuser-nictune/known_hosts"}, "known_hosts"),
])
def test_bad_host_fields(tmp_path: Path, host: dict, field: str) -> None:
    with pytest.raises(InventoryError, match=f"hosts.rx1.{field}"):
        load_inventory(write_inventory(tmp_path, host))


def test_bad_top_level(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="unknown key"):
        load_inventory(write_inventory(tmp_path, extra=1))
    path = tmp_path / "bad.yaml"
    path.write_text("hosts: [a, b]\n")
    with pytest.raises(InventoryError, match="hosts"):
        load_inventory(path)
    with pytest.raises(InventoryError, match="cannot read"):
        load_inventory(tmp_path / "none.yaml")


def test_one_machine_under_two_names_is_refused(tmp_path: Path) -> None:
    """Each name's snapshot would hold the other's changes, and a rollback of both would
    leave the machine tuned while saying ok."""
    path = write_inventory(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["hosts"]["rx1b"] = {"address": "192.0.2.1", "nics": {"nic-2": "eth2"}}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InventoryError, match=r"hosts\.rx1b: the same machine as hosts\.rx1"):
        load_inventory(path)
    doc["hosts"]["rx1b"]["port"] = 2222  # another sshd: another machine (a lab's, say)
    path.write_text(yaml.safe_dump(doc))
    assert set(load_inventory(path).hosts) == {"rx1", "rx1b"}
    doc["hosts"]["rx1b"] = {"address": "192.0.2.1", "netns": "b", "nics": {"nic-2": "eth2"}}
    path.write_text(yaml.safe_dump(doc))
    assert set(load_inventory(path).hosts) == {"rx1", "rx1b"}
    # the same address spelled another way (a review's case: both reached one sshd)
    for first, other in (("192.0.2.1", "::ffff:192.0.2.1"), ("rx.example.org",
                                                            "RX.example.org.")):
        doc["hosts"]["rx1"]["address"] = first
        doc["hosts"]["rx1b"] = {"address": other, "nics": {"nic-2": "eth2"}}
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(InventoryError, match=r"the same machine as hosts\.rx1"):
            load_inventory(path)


@pytest.mark.parametrize("text, message", [
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA nictune\n", "is not a private key (the .pub key?)"),
    ("", "is not a private key"),
    ("PuTTY-User-Key-File-3: ssh-ed25519\n", "is not a private key"),
    # (a review: these passed the first-line check and failed at connect, exit 1)
    ("-----BEGIN OPENSSH PRIVATE KEY-----\ngarbage\n-----END OPENSSH PRIVATE KEY-----\n",
     "is not a private key paramiko can read"),
    (Ed25519PrivateKey.generate().private_bytes(
        Encoding.PEM, PrivateFormat.OpenSSH, BestAvailableEncryption(b"pw")).decode(),
     "needs a passphrase"),
])
def test_a_key_file_that_is_no_private_key_is_refused(tmp_path: Path, text: str,
                                                      message: str) -> None:
    """It failed only at connect ("not a valid OPENSSH private key file", exit 1), as one
    host's failure after the others had changed."""
    path = write_inventory(tmp_path)
    (tmp_path / "id_ed25519").write_text(text)
    with pytest.raises(InventoryError, match=re.escape(f"hosts.rx1.key_file: {tmp_path}")
                       + ".*" + re.escape(message)):
        load_inventory(path)


def test_plan_must_match_inventory(tmp_path: Path) -> None:
    inv = load_inventory(write_inventory(tmp_path))
    check_plan_nics(inv, [("rx1", "nic-1")])
    with pytest.raises(InventoryError, match=r"^plan: host rx1: no nic 'nic-9'"):
        check_plan_nics(inv, [("rx1", "nic-9")])
    with pytest.raises(InventoryError, match="host 'rx9'"):
        check_plan_nics(inv, [("rx9", "nic-1")])
    with pytest.raises(InventoryError, match="unknown host"):
        inv.select(["rx7"])


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        code = main(args)
    except SystemExit as exc:  # (argparse's own errors exit 2 from inside)
        code = int(exc.code or 0)
    return code, capsys.readouterr().err, time.monotonic() - started


@pytest.mark.parametrize("command", ["deploy", "probe", "rollback"])
def test_injection_refused_before_connecting(tmp_path: Path, command: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path, {"nics": {"nic-1": "eth0; reboot"}})
    args = [command, "--inventory", str(inv)]
    if command == "deploy":
        args.insert(1, str(write_plan(tmp_path)))
    code, err, seconds = run_cli(args, capsys)
    # 192.0.2.1 is unroutable: any connection attempt would take the 10 s connect timeout
    assert code == 2 and seconds < 5
    assert "eth0; reboot" in err and "Traceback" not in err


@pytest.mark.parametrize("plan, message", [
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "nic": "nic-9"}]}, "nic-9"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "host": "rx9"}]}, "rx9"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "host": "a;b"}]}, "host"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0],
                                 "setting": {"mode": "active_wait", "ring_slots": "many"}}]},
     "ring_slots"),
    ({"nictune_plan": 7}, "nictune_plan"),
    ({"nictune_plan": True}, "nictune_plan"),
    ({**PLAN, "seed": "abc"}, "seed"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "id": "t1\n"}]}, "id"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "rate_pps": float("nan")}]},
     "rate_pps"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "size_bytes": float("inf")}]},
     "size_bytes"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0],
                                 "setting": {"mode": "active_wait", "ring_slots": 1024,
                                             "placement": ""}}]}, "placement"),
    ({**PLAN, "transmissions": [{**PLAN["transmissions"][0], "predicted": {
        "default": {"throughput_bps": "fast"}}}]}, "predicted.default.throughput_bps"),
])
def test_bad_plans_refused(tmp_path: Path, plan: dict, message: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path)
    code, err, seconds = run_cli(["deploy", str(write_plan(tmp_path, plan)), "--inventory",
                                  str(inv)], capsys)
    assert code == 2 and seconds < 5 and message in err


def test_bad_options_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv, plan = str(write_inventory(tmp_path)), str(write_plan(tmp_path))
    for args in (["deploy", "--inventory", inv],
                 ["deploy", plan, "--inventory", inv, "--confirm"],
                 ["deploy", plan, "--inventory", inv, "--confirm-timeout", "0"],
                 ["deploy", plan, "--inventory", inv, "--hosts", "nobody"],
                 ["probe", "--inventory", inv, "--workers", "0"]):
        code, err, _ = run_cli(args, capsys)
        assert code == 2, args
        assert "Traceback" not in err


@pytest.mark.parametrize(("text", "message"), [
    (b"hosts: {rx1: \xff\xfe}\n", "not UTF-8"),
    (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b"hosts:\n  rx1: {address: 192.0.2.1}\n  rx1: {address: 192.0.2.2}\n",
     "duplicate key 'rx1'"),
    (b'hosts:\n  "bad\\nhost": {address: 192.0.2.1}\n', "bad\\nhost"),  # (one line)
    (b"hosts: {rx1: {address: 192.0.2.1, port: " + b"9" * 5000 + b"}}\n",
     "an integer of more digits than can be read"),
])
def test_unreadable_inventories_are_one_line_errors(tmp_path: Path, text: bytes, message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a fuzz run: tracebacks (UnicodeDecodeError, RecursionError), and a host
    listed twice silently losing the first entry."""
    path = tmp_path / "inventory.yaml"
    path.write_bytes(text)
    code, err, _ = run_cli(["probe", "--inventory", str(path)], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_an_endless_file_is_refused_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    """`--inventory /dev/zero` read until the machine ran out of memory (a review: the
    OOM killer at 24 GB); configs and plans are read the same way."""
    code, err, _ = run_cli(["probe", "--inventory", "/dev/zero"], capsys)
    assert code == 2 and "/dev/zero is larger than 64 MiB" in err, err


@pytest.mark.parametrize("args", [
    ["rollback", "--guard-timeout", "nan"], ["rollback", "--guard-timeout", "0"],
    ["validate", "PLAN", "--sender", "rx1", "--duration", "inf"],
    ["validate", "PLAN", "--sender", "rx1", "--max-rate", "1e-320"],
    ["calibrate", "--sender", "rx1", "--receiver", "rx1", "--rates", "inf"],
])
def test_out_of_range_options_refused_before_connecting(
        tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """NaN, infinity or zero reached a timer or a rate (1e6 / rate) before: a traceback
    after connecting, or a rollback armed for NaN seconds."""
    args = [str(write_plan(tmp_path)) if a == "PLAN" else a for a in args]
    code, err, seconds = run_cli([*args, "--inventory", str(write_inventory(tmp_path))], capsys)
    assert code == 2 and seconds < 5 and "Traceback" not in err, err


@pytest.mark.parametrize(("args", "message"), [
    (["validate", "PLAN", "--sender", "rx1", "--out", "FILE"], "is a file, not a directory"),
    (["validate", "PLAN", "--sender", "rx1", "--out", "FILE/report"], "is not a directory"),
    (["calibrate", "--sender", "rx1", "--receiver", "rx1", "--out", "DIR"],
     "is a directory, not a file"),
    (["optimize", "CONFIG", "--out", "FILE"], "is a file, not a directory"),
    (["optimize", "CONFIG", "--out", ""], "empty path"),  # (it meant ".")
    # a path the file system refuses to look at (ENAMETOOLONG here; EACCES for a user
    # who may not search a directory) is one line too, not a traceback
    (["validate", "PLAN", "--sender", "rx1", "--out", "x" * 5000], "cannot write"),
    # a directory that passes os.access (for root, every one) where nothing can be made:
    # optimize ran its whole search before failing to save it, with a traceback
    (["optimize", "CONFIG", "--out", "/proc/nictune-run"], "cannot write /proc/nictune-run"),
])
def test_unwritable_outputs_refused_before_any_work(
        tmp_path: Path, args: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """validate checked --out only when it wrote the report, after connecting and
    measuring for minutes."""
    (tmp_path / "file").write_text("x")
    names = {"PLAN": str(write_plan(tmp_path)), "FILE": str(tmp_path / "file"),
             "FILE/report": str(tmp_path / "file" / "report"), "DIR": str(tmp_path),
             "CONFIG": str(ROOT / "configs" / "paper-47.yaml")}
    args = [names.get(a, a) for a in args]
    extra = [] if args[0] == "optimize" else ["--inventory", str(write_inventory(tmp_path))]
    code, err, seconds = run_cli([*args, *extra], capsys)
    assert code == 2 and message in err and seconds < 5, err
    assert len(err.strip().splitlines()) == 1
