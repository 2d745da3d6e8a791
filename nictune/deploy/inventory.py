"""The inventory: which hosts exist and how to reach them (DESIGN §6).

```yaml
defaults: {user: root, port: 22, key_file: id_ed25519, known_hosts: known_hosts, sudo: false}
hosts:
  rx1:
    address: 10.0.0.2          # IPv4, IPv6 or DNS name
    port: 22
    user: root
    key_file: keys/id_ed25519  # relative paths are relative to this file
    known_hosts: known_hosts
    sudo: false                # true: every command runs under `sudo -n`
    nics: {nic-1: eth1}        # plan NIC id -> interface name on the host
    netns: lab1-rx1            # optional: connect from inside this network namespace (lab)
    root: /                    # optional: prefix of the files nictune writes on the host
```

Everything is validated before any connection: a value that would reach a remote shell
(an interface called `eth0; reboot`) is refused with exit code 2. Commands quote every
value anyway (`shlex.quote`), so validation and quoting are two independent guards.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from nictune.errors import InputError, read_yaml

HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
NIC_ID = HOST_NAME
# Linux interface names: at most 15 bytes, no '/', ':' or whitespace (the kernel's
# dev_valid_name; "eth0:1" is an address label, not a device ethtool knows); we also
# refuse shell metacharacters and a leading '-' (it would read as an option to ethtool/ip).
IFACE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,14}\Z")
USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\Z")
DNS_NAME = re.compile(r"^(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z")
NETNS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
REMOTE_PATH = re.compile(r"^/[A-Za-z0-9_./-]*\Z")
SCOPE = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")  # an IPv6 zone: an interface name or number
HOST_KEYS = ("address", "port", "user", "key_file", "known_hosts", "sudo", "nics", "netns",
             "root")


class InventoryError(InputError):
    """An inventory that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class HostInventory:
    """One host as the inventory describes it (paths already resolved)."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: Path = Path("id_ed25519")
    known_hosts: Path = Path("known_hosts")
    sudo: bool = False
    nics: dict[str, str] = field(default_factory=dict)
    netns: str | None = None
    root: str = "/"
    state_dir: Path = Path(".nictune")  # local: snapshots and audit log (beside the inventory)

    def iface(self, nic_id: str) -> str:
        """The interface carrying plan NIC `nic_id`; InventoryError if the host lacks it."""
        try:
            return self.nics[nic_id]
        except KeyError:
            known = ", ".join(self.nics) or "none"
            raise InventoryError(f"host {self.name}: no nic {nic_id!r} in the inventory "
                                 f"(nics: {known})") from None

    def remote_path(self, path: str) -> str:
        """`path` (absolute, on the host) under the host's `root` prefix."""
        return path if self.root == "/" else self.root.rstrip("/") + path


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, HostInventory]
    path: Path

    def select(self, names: Iterable[str] | None) -> list[HostInventory]:
        """The named hosts in the order given (all hosts when `names` is empty)."""
        names = list(names or [])
        if not names:
            return list(self.hosts.values())
        unknown = [n for n in names if n not in self.hosts]
        if unknown:
            raise InventoryError(f"{self.path}: --hosts: unknown host {unknown[0]!r} "
                                 f"(hosts: {', '.join(self.hosts)})")
        return [self.hosts[n] for n in dict.fromkeys(names)]


def _fail(source: str, where: str, reason: str) -> InventoryError:
    return InventoryError(f"{source}: {where}: {reason}")


def _address(value: Any, source: str, where: str) -> str:
    if isinstance(value, str):
        try:
            address = str(ipaddress.ip_address(value))
            # (ipaddress takes anything as an IPv6 scope after '%', newlines and '$(' too)
            if "%" not in address or SCOPE.match(address.partition("%")[2]):
                return address
        except ValueError:
            if DNS_NAME.match(value) and not value.replace(".", "").isdigit():
                return value
    raise _fail(source, where, f"expected an IP address or DNS name, got {value!r}")


def _path(value: Any, base: Path, source: str, where: str, must_exist: bool) -> Path:
    if not isinstance(value, str) or not value or "\0" in value:
        raise _fail(source, where, f"expected a file path, got {value!r}")
    try:
        path = Path(value).expanduser()  # RuntimeError: "~nosuchuser/key"
        path = path if path.is_absolute() else base / path
        if must_exist and not path.is_file():
            raise _fail(source, where, f"no such file {path}")
        if not must_exist and not path.parent.is_dir():
            raise _fail(source, where, f"directory {path.parent} does not exist")
        if path.is_dir():
            raise _fail(source, where, f"{path} is a directory, not a file")
    except OSError as exc:  # (a name too long, say)
        raise _fail(source, where, f"not a usable path {value!r}: {exc.strerror}") from None
    except RuntimeError as exc:
        raise _fail(source, where, f"not a usable path {value!r}: {exc}") from None
    return path


def _private_key(path: Path, source: str, where: str) -> Path:
    """`path` if paramiko can load the private key in it, without a passphrase: a public
    key, a damaged key or one with a passphrase failed only at connect, as a host's
    failure (or "authentication failed"), after other hosts had changed."""
    try:
        with path.open("rb") as fh:
            first = fh.readline(200)
    except OSError as exc:
        raise _fail(source, where, f"cannot read {path}: {exc.strerror}") from None
    if not (first.startswith(b"-----BEGIN ") and b"PRIVATE KEY-----" in first):
        hint = " (the .pub key?)" if first.startswith((b"ssh-", b"ecdsa-")) else ""
        raise _fail(source, where, f"{path} is not a private key{hint}")
    try:
        paramiko.PKey.from_path(path)
    except (paramiko.PasswordRequiredException, TypeError):  # (TypeError: cryptography's)
        raise _fail(source, where, f"{path} needs a passphrase (nictune uses keys without "
                                   "one; no agent)") from None
    except Exception as exc:  # (paramiko and cryptography raise many kinds)
        reason = str(exc).split(". ")[0] or type(exc).__name__
        raise _fail(source, where, f"{path} is not a private key paramiko can read: "
                                   f"{reason}") from None
    return path


def _host(name: Any, raw: Any, defaults: dict[str, Any], base: Path,
          source: str) -> HostInventory:
    if not isinstance(name, str) or not HOST_NAME.match(name):
        raise _fail(source, f"hosts.{name}", "host names are letters, digits, '_', '.', '-'")
    where = f"hosts.{name}"
    if not isinstance(raw, dict):
        raise _fail(source, where, f"expected a mapping, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in HOST_KEYS]
    if unknown:
        raise _fail(source, f"{where}.{unknown[0]}",
                    f"unknown key (allowed: {', '.join(HOST_KEYS)})")
    f = {**defaults, **raw}
    port = f.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise _fail(source, f"{where}.port", f"expected a port 1..65535, got {port!r}")
    user = f.get("user", "root")
    if not isinstance(user, str) or not USER.match(user):
        raise _fail(source, f"{where}.user", f"expected a user name, got {user!r}")
    sudo = f.get("sudo", False)
    if not isinstance(sudo, bool):
        raise _fail(source, f"{where}.sudo", f"expected true or false, got {sudo!r}")
    nics = f.get("nics") or {}
    if not isinstance(nics, dict):
        raise _fail(source, f"{where}.nics", "expected a mapping of NIC id to interface")
    for nic, iface in nics.items():
        if not isinstance(nic, str) or not NIC_ID.match(nic):
            raise _fail(source, f"{where}.nics", f"bad NIC id {nic!r}")
        if not isinstance(iface, str) or not IFACE.match(iface):
            raise _fail(source, f"{where}.nics.{nic}",
                        f"expected an interface name (up to 15 of A-Z a-z 0-9 _ . @ -, "
                        f"not starting with '-'), got {iface!r}")
    if len(set(nics.values())) != len(nics):
        raise _fail(source, f"{where}.nics", "two NIC ids name the same interface")
    netns = f.get("netns")
    if netns is not None and (not isinstance(netns, str) or not NETNS.match(netns)):
        raise _fail(source, f"{where}.netns", f"expected a namespace name, got {netns!r}")
    root = f.get("root", "/")
    if not isinstance(root, str) or not REMOTE_PATH.match(root) or ".." in root.split("/"):
        raise _fail(source, f"{where}.root", f"expected an absolute path, got {root!r}")
    if "address" not in f:
        raise _fail(source, f"{where}.address", "is required")
    return HostInventory(
        name=name,
        address=_address(f["address"], source, f"{where}.address"),
        port=port, user=user, sudo=sudo, nics=dict(nics), netns=netns, root=root,
        state_dir=base / ".nictune",
        key_file=_private_key(_path(f.get("key_file", "id_ed25519"), base, source,
                                    f"{where}.key_file", must_exist=True),
                              source, f"{where}.key_file"),
        known_hosts=_path(f.get("known_hosts", "known_hosts"), base, source,
                          f"{where}.known_hosts", must_exist=False),
    )


def parse_inventory(raw: Any, path: Path) -> Inventory:
    """Validate a loaded inventory document; paths are relative to `path`'s directory."""
    source = str(path)
    if not isinstance(raw, dict):
        raise _fail(source, "(top level)", "expected a mapping with 'hosts'")
    unknown = [k for k in raw if k not in ("hosts", "defaults")]
    if unknown:
        raise _fail(source, unknown[0], "unknown key (allowed: hosts, defaults)")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict) or [k for k in defaults if k not in HOST_KEYS]:
        raise _fail(source, "defaults", f"expected a mapping of {', '.join(HOST_KEYS)}")
    hosts = raw.get("hosts")
    if not isinstance(hosts, dict) or not hosts:
        raise _fail(source, "hosts", "expected a non-empty mapping of host name to host")
    base = path.parent
    parsed = {str(n): _host(n, h, defaults, base, source) for n, h in hosts.items()}
    seen: dict[tuple[str, int, str | None], str] = {}
    for h in parsed.values():
        # one machine under two names: each name's snapshot would record the other's
        # changes, and a rollback would put them back
        first = seen.setdefault((_machine(h.address), h.port, h.netns), h.name)
        if first != h.name:
            raise _fail(source, f"hosts.{h.name}",
                        f"the same machine as hosts.{first} (address {h.address}, port "
                        f"{h.port}{f', netns {h.netns}' if h.netns else ''}); list all its "
                        "NICs under one host")
    return Inventory(hosts=parsed, path=path)


def _machine(address: str) -> str:
    """One spelling per machine: `::ffff:10.0.0.2` is 10.0.0.2, a DNS name's case and
    trailing dot do not count (each reached the same sshd under two host names)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower().rstrip(".")
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate `inventory.yaml`; InventoryError (exit 2) names what is wrong."""
    path = Path(path).resolve()
    raw = read_yaml(path, "inventory", InventoryError)
    return parse_inventory(raw, path)


def check_plan_nics(inventory: Inventory, pairs: Iterable[tuple[str, str]],
                    source: str = "plan") -> None:
    """Every (host, nic) of a plan exists in the inventory; else InventoryError."""
    for host, nic in pairs:
        if host not in inventory.hosts:
            raise InventoryError(f"{source}: host {host!r} is not in the inventory "
                                 f"{inventory.path} (hosts: {', '.join(inventory.hosts)})")
        try:
            inventory.hosts[host].iface(nic)
        except InventoryError as exc:
            raise InventoryError(f"{source}: {exc}; the inventory is {inventory.path}") \
                from None
