"""Connection errors that need no host: each is one line naming what is wrong."""

from pathlib import Path

import pytest

from nictune.deploy.inventory import HostInventory
from nictune.deploy.transport import Connection, HostError


def test_a_malformed_known_hosts_line_is_named_not_raised_raw(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("192.0.2.10 ssh-ed25519 AAAA!!notbase64\n")
    host = HostInventory("rx1", "192.0.2.10", key_file=tmp_path / "key", known_hosts=known)
    with pytest.raises(HostError) as err:
        Connection(host).connect()
    message = str(err.value)
    assert f"cannot read known_hosts {known}" in message
    assert "malformed key in line '192.0.2.10 ssh-ed25519 AAAA!!notbase64'" in message
    assert "\n" not in message


def test_a_file_transfer_without_a_session_says_not_connected() -> None:
    conn = Connection(HostInventory("rx1", "192.0.2.10"))
    assert not conn.connected
    with pytest.raises(HostError, match="rx1: not connected"):
        conn.put("/etc/hostname", "/tmp/x")
