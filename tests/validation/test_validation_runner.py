"""The validation runner's own logic: putting the receivers back."""

from __future__ import annotations

from pathlib import Path

import pytest

from nictune.deploy.inventory import HostInventory, Inventory
from nictune.validation import runner


def test_a_second_ctrl_c_while_putting_receivers_back_names_the_host_and_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C again while the first receiver is put back: that one is named as left with
    an arm's setting (so the CLI prints the rollback command), the others are still put
    back, and the interrupt goes on. Before, the interrupt escaped the loop: the other
    receivers stayed tuned and nothing said so."""
    class Conn:
        def __init__(self, host: HostInventory) -> None:
            self.host, self.closed = host, False

        def connect(self) -> Conn:
            return self

        def close(self) -> None:
            self.closed = True

    put_back: list[str] = []

    def fake_put_back(h: runner._Host) -> object:
        put_back.append(h.host.name)
        if h.host.name == "rx1":
            raise KeyboardInterrupt
        return type("Result", (), {"ok": True, "status": "restored"})()

    monkeypatch.setattr(runner, "Connection", Conn)
    monkeypatch.setattr(runner.tx, "load_snapshot", lambda *a: None)
    monkeypatch.setattr(runner, "_put_back", fake_put_back)
    hosts = {n: HostInventory(name=n, address="10.0.0.1") for n in ("rx1", "rx2")}
    inventory = Inventory(path=Path("inv.yaml"), hosts=hosts)
    restored: dict[str, str] = {}
    with pytest.raises(KeyboardInterrupt), runner._receivers(inventory, ["rx1", "rx2"],
                                                             restored):
        pass
    assert put_back == ["rx1", "rx2"]
    assert restored == {"rx1": "FAILED: interrupted while putting it back", "rx2": "restored"}
    assert "nictune rollback --inventory inv.yaml --hosts rx1" in runner.unrestored(
        restored, "inv.yaml")
