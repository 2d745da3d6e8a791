"""`nictune lab` refuses clearly (exit 2) where no lab can be built."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nictune.cli import main
from nictune.deploy import lab


def lab_possible() -> None:
    """Skip unless this machine can build a lab: its checks (root, `ip netns`, sshd) come
    before the directory's (`make unit` does not install sshd; `make test` does)."""
    try:
        lab.check_lab_possible()
    except lab.LabUnavailable as e:
        pytest.skip(f"the lab's own checks come first: {e}")


def test_not_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lab.os, "geteuid", lambda: 1000)
    assert main(["lab", "up", "--dir", str(tmp_path)]) == 2
    assert "needs root" in capsys.readouterr().err
    assert not (tmp_path / "lab.json").exists()


def test_no_ip_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0)
    real = shutil.which
    monkeypatch.setattr(lab.shutil, "which", lambda name: None if name == "ip" else real(name))
    assert main(["lab", "up", "--dir", str(tmp_path)]) == 2
    assert "iproute2" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{}", "[]", "[" * 100_000, '{"id": 1, "hosts": 5}'])
def test_a_damaged_lab_record_is_no_lab(tmp_path: Path, text: str) -> None:
    """A lab.json that is JSON but not a lab record (a review: KeyError, TypeError and
    RecursionError tracebacks from `lab down`)."""
    (tmp_path / "lab.json").write_text(text)
    with pytest.raises(lab.InputError, match="no lab in"):
        lab.load_lab(tmp_path)


@pytest.mark.parametrize("host", [
    {"name": "sender", "netns": "victim"},  # someone else's namespace
    {"name": "sender", "netns": "ntab12-rx1"},  # another host's
    {"name": "x; id", "netns": "ntab12-x; id"},
    {"name": "sender", "netns": "ntab12-sender", "sshd_pid": "1"},
])
def test_a_lab_record_naming_other_namespaces_is_refused(tmp_path: Path, host: dict,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """`lab down` kills what runs in the recorded namespaces and deletes them: a
    hand-made or damaged lab.json named any namespace (a review killed and deleted one)."""
    record = {"id": "ab12", "links": [],
              "hosts": [{"address": "10.1.0.1", "root": str(tmp_path), **host}]}
    (tmp_path / "lab.json").write_text(lab.json.dumps(record))
    with pytest.raises(lab.InputError, match="not a lab's own"):
        lab.load_lab(tmp_path)
    assert main(["lab", "down", "--dir", str(tmp_path)]) == 2
    assert "not touching them" in capsys.readouterr().err
    record["hosts"][0].update(name="sender", netns="ntab12-sender", sshd_pid=0)
    (tmp_path / "lab.json").write_text(lab.json.dumps(record))
    assert lab.load_lab(tmp_path).hosts[0].netns == "ntab12-sender"


def test_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if lab.os.geteuid() != 0:
        pytest.skip("the root check comes first")
    assert main(["lab", "up", "--dir", str(tmp_path), "--hosts", "1"]) == 2
    assert main(["lab", "up", "--dir", str(tmp_path), "--prefix", "Bad-Prefix"]) == 2
    assert main(["lab", "down", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--hosts" in err and "--prefix" in err and "no lab" in err


def test_a_lab_directory_that_cannot_be_made(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`--dir` under /proc (or a file) failed with a traceback from mkdir."""
    (tmp_path / "file").write_text("x")
    for where in ("/proc/nictune-lab", str(tmp_path / "file")):
        with pytest.raises(SystemExit) as stop:
            main(["lab", "up", "--dir", where])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"--dir: cannot write {where}" in err or "is a file" in err, err
        assert len(err.strip().splitlines()) == 1


def test_lab_id_is_stable_and_distinct(tmp_path: Path) -> None:
    assert lab.lab_id(tmp_path / "a") == lab.lab_id(tmp_path / "a")
    assert lab.lab_id(tmp_path / "a") != lab.lab_id(tmp_path / "b")
    assert lab.lab_id(tmp_path, "x1") == "x1"


def test_a_directory_in_use_or_unnameable_is_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`lab up` wrote its keys and inventory over a non-empty --dir and `lab down` then
    deleted them with it (a review lost a real host's snapshot in DIR/.nictune), and a
    --dir the inventory cannot name (`+`, a space) was built and then unusable."""
    lab_possible()
    used = tmp_path / "used"
    (used / ".nictune").mkdir(parents=True)
    (used / ".nictune" / "db1.json").write_text("real\n")
    (used / "inventory.yaml").write_text("hosts: {db1: {address: 10.1.1.1}}\n")
    assert main(["lab", "up", "--dir", str(used), "--prefix", "zq1"]) == 2
    assert "is not an empty directory" in capsys.readouterr().err
    assert (used / "inventory.yaml").read_text() == "hosts: {db1: {address: 10.1.1.1}}\n"
    assert (used / ".nictune" / "db1.json").read_text() == "real\n"
    for bad in ("a+lab", "my lab"):
        assert main(["lab", "up", "--dir", str(tmp_path / bad), "--prefix", "zq1"]) == 2
        assert "has a character other than" in capsys.readouterr().err
        assert not (tmp_path / bad).exists()


def test_lab_down_by_prefix_checks_the_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "down", "--prefix", "Bad-1"]) == 2
    assert "--prefix: expected 1-8 of a-z 0-9" in capsys.readouterr().err
    if lab.os.geteuid() == 0:
        assert main(["lab", "down", "--prefix", "zq9none"]) == 2
        assert "no namespace of lab zq9none" in capsys.readouterr().err


def test_two_ups_into_one_directory_the_second_touches_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both pass the empty-directory check; the first to create lab.json has the
    directory. The second one's clean-up had reloaded lab.json — by then the first's —
    and torn that lab down (a review). Here the first claims the directory while the
    second lists the namespaces."""
    lab_possible()
    d = tmp_path / "lab"
    winner = '{"id": "zq7", "hosts": [], "links": [], "made": []}\n'
    real = lab._run

    def meanwhile(argv, *args, **kwargs):
        if list(argv) == ["ip", "netns", "list"] and not (d / "lab.json").exists():
            d.mkdir(parents=True, exist_ok=True)
            (d / "lab.json").write_text(winner)
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(lab, "_run", meanwhile)
    with pytest.raises(lab.InputError, match="already holds a lab"):
        lab.lab_up(d, prefix="zq7")
    assert (d / "lab.json").read_text() == winner and sorted(p.name for p in d.iterdir()) == [
        "lab.json"]
