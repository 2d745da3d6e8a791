"""A local testbed: network-namespace hosts joined by veth links, each with a real sshd.

`nictune lab up --hosts N --dir DIR` builds hosts `sender`, `rx1` … `rx{N-1}`:

* one network namespace per host, named `nt{ID}-{host}` where ID is `--prefix` or a hash of
  DIR, so several labs (two test runs at once) never collide;
* a bridge-free star of veth links: the sender has one veth per receiver (`veth-rxK`,
  10.A.K.1/24), the receiver's end is `veth0` (10.A.K.2/24), so traffic to rxK crosses
  exactly one link; A is derived from the lab id too;
* a management network: a namespace `nt{ID}-mgmt` (the "admin workstation", 10.A.0.254)
  with one veth to each host's `mgmt0` (10.A.0.(i+1)/32), where that host's sshd listens
  (ListenAddress only inside its namespace). The client's SSH sockets are created inside
  the management namespace (inventory `netns:`), so the SSH session really crosses the
  host's `mgmt0` and the lab adds no interface or address to the machine's own namespace;
* per host an sshd with its own ed25519 host key, one authorized client key, started with
  `ip netns exec NS /usr/sbin/sshd -f CONFIG` (its pid is recorded), and a private `root`
  directory for the files nictune writes (pf_ring.conf, capture profiles), because all
  namespaces share one filesystem.

It writes DIR/inventory.yaml, DIR/known_hosts, DIR/id_ed25519(.pub), DIR/config.yaml (the
receivers' NICs and one transmission per receiver, so `nictune optimize DIR/config.yaml`
gives a plan that deploys on the lab as is) and DIR/lab.json (what to tear down).
`nictune lab down --dir DIR` kills the sshd pids it started and any process left inside
its namespaces, deletes the namespaces (and with them the veths) and the files it wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nictune.deploy.inventory import REMOTE_PATH
from nictune.errors import InputError, RunError
from nictune.model import NicSetting
from nictune.plan import Plan, PlanEntry, save_plan

SSHD = "/usr/sbin/sshd"
STATE = "lab.json"
PREFIX = re.compile(r"^[a-z0-9]{1,8}\Z")
LAB_HOST = re.compile(r"^(sender|rx[1-9][0-9]{0,2})\Z")
MAX_HOSTS = 200
# One transmission per receiver, cycling through these (size, packet size, rate, arrival).
TRANSMISSIONS = (
    ("8MB", 1400, "3600pps", "poisson"),
    ("4MB", 512, "8000pps", "onoff"),
    ("2MB", 128, "12000pps", "cbr"),
)


class LabUnavailable(InputError):
    """The machine cannot host a lab (not root, no `ip netns`, no sshd). Exit code 2."""


@dataclass
class LabLink:
    """The veth link sender -> receiver."""

    receiver: str
    nic: str  # NIC id of the receiver's end (config and inventory)
    sender_iface: str
    sender_address: str
    receiver_iface: str
    receiver_address: str


@dataclass
class LabHost:
    name: str
    netns: str
    address: str  # management address (sshd)
    root: str  # the host's private root for files nictune writes
    nics: dict[str, str] = field(default_factory=dict)  # NIC id -> iface
    sshd_pid: int = 0
    sshd_config: str = ""


@dataclass
class Lab:
    dir: Path
    id: str
    hosts: list[LabHost]
    links: list[LabLink]
    made: list[str] = field(default_factory=list)  # namespaces this lab added (`down` deletes)

    @property
    def mgmt_netns(self) -> str:
        """The management namespace: where the client's SSH sockets live."""
        return f"nt{self.id}-mgmt"

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yaml"

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def key_file(self) -> Path:
        return self.dir / "id_ed25519"

    def netns_names(self) -> list[str]:
        return [h.netns for h in self.hosts] + [self.mgmt_netns]

    def host(self, name: str) -> LabHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def link(self, receiver: str) -> LabLink:
        for link in self.links:
            if link.receiver == receiver:
                return link
        raise KeyError(receiver)

    def write_plan(self, path: Path, settings: Mapping[str, NicSetting]) -> Path:
        """Write a plan that gives each named receiver's lab NIC its setting (a hand-made
        deploy, no predictions); returns `path`."""
        entries = [PlanEntry(id=f"t-{rx}", host=rx, nic=self.link(rx).nic, setting=s,
                             default_setting=s) for rx, s in settings.items()]
        save_plan(Plan(entries=entries, meta={"source": "nictune.deploy.lab"}), path)
        return path

    def exec(self, host: str, argv: Sequence[str], timeout: float = 30.0,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run argv inside a host's namespace locally (independent of SSH: for read-backs)."""
        return _run(["ip", "netns", "exec", self.host(host).netns, *argv], timeout=timeout,
                    check=check)

    def kill_sshd(self, host: str) -> None:
        """Kill the host's sshd and every session it serves (fault injection)."""
        h = self.host(host)
        for pid in _netns_pids(h.netns):
            if _comm(pid).startswith("sshd"):
                _kill(pid, signal.SIGKILL)
        h.sshd_pid = 0
        self._save()

    def start_sshd(self, host: str) -> None:
        """(Re)start the host's sshd with its recorded config."""
        h = self.host(host)
        h.sshd_pid = _start_sshd(h)
        self._save()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "dir": str(self.dir), "hosts": [asdict(h) for h in self.hosts],
                "links": [asdict(x) for x in self.links], "made": list(self.made)}

    def _save(self) -> None:
        _write(self.dir / STATE, json.dumps(self.to_json(), indent=2) + "\n")


# ----------------------------------------------------------------------------- helpers


def _run(argv: Sequence[str], timeout: float = 30.0,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError(f"lab: {' '.join(argv)} did not end within {timeout:.0f} s") from None
    if check and res.returncode != 0:
        raise RunError(f"lab: {' '.join(argv)} failed: {res.stderr.strip() or res.returncode}")
    return res


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)


def _netns_pids(netns: str) -> list[int]:
    res = _run(["ip", "netns", "pids", netns], check=False)
    return [int(x) for x in res.stdout.split() if x.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop(pid: int) -> None:
    """SIGTERM, then SIGKILL if it is still running after 2 s."""
    _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if process_alive(pid):
        _kill(pid, signal.SIGKILL)


def _in_netns(pid: int, netns: str) -> bool:
    """Whether process `pid` lives in network namespace `netns` (so the lab owns it)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return False


def check_lab_possible() -> None:
    """Raise LabUnavailable with the reason when this machine cannot build a lab."""
    if os.geteuid() != 0:
        raise LabUnavailable("lab: needs root (network namespaces and sshd); run as root or "
                             "use real hosts with an inventory")
    if shutil.which("ip") is None:
        raise LabUnavailable("lab: the `ip` command (iproute2) is missing")
    res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if res.returncode != 0:
        raise LabUnavailable(f"lab: `ip netns` does not work here: {res.stderr.strip()}")
    for tool in (SSHD, shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"):
        if not os.access(tool, os.X_OK):
            raise LabUnavailable(f"lab: {tool} is missing (apt-get install openssh-server "
                                 "openssh-client)")


def lab_id(directory: Path, prefix: str | None = None) -> str:
    """The lab's id: `prefix` or 6 hex digits of a hash of the directory."""
    if prefix is not None:
        if not PREFIX.match(prefix):
            raise InputError(f"lab: --prefix: expected 1-8 of a-z 0-9, got {prefix!r}")
        return prefix
    return hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:6]


def _octet(ident: str) -> int:
    return 64 + int(hashlib.sha1(ident.encode()).hexdigest()[:4], 16) % 128


def _keygen(path: Path, comment: str) -> str:
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_name(path.name + ".pub").read_text().strip()


SSHD_CONFIG = """\
# nictune lab host {name} (namespace {netns})
ListenAddress {address}
Port 22
HostKey {hostkey}
PidFile {pidfile}
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 200
MaxSessions 100
LogLevel ERROR
Subsystem sftp internal-sftp
# bash sources ~/.bashrc for ssh commands only at SHLVL < 2: keep a lab host's commands
# as lean as a minimal server's (this machine's root .bashrc runs pyenv init, 0.3 s)
SetEnv SHLVL=1
"""


def _start_sshd(h: LabHost) -> int:
    pidfile = Path(h.sshd_config).with_name("sshd.pid")
    pidfile.unlink(missing_ok=True)
    log = Path(h.sshd_config).with_name("sshd.log")
    _run(["ip", "netns", "exec", h.netns, SSHD, "-f", h.sshd_config, "-E", str(log)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):  # not written yet
            pid = int(pidfile.read_text().split()[0])
            if _in_netns(pid, h.netns):
                return pid
        time.sleep(0.02)
    raise RunError(f"lab: sshd of {h.name} did not start (see {log})")


# ----------------------------------------------------------------------------- up / down


def lab_up(directory: str | Path, hosts: int = 3, prefix: str | None = None) -> Lab:
    """Build the lab in `directory` (see the module doc); on any failure undo it all."""
    # bad options first: they are wrong on any machine
    if not 2 <= hosts <= MAX_HOSTS:
        raise InputError(f"lab: --hosts: expected 2..{MAX_HOSTS} (a sender and at least one "
                         f"receiver), got {hosts}")
    directory = Path(directory).resolve()
    ident = lab_id(directory, prefix)
    if not REMOTE_PATH.match(str(directory)):  # (the inventory's `root:` rule)
        raise InputError(f"lab: --dir: {str(directory)!r} has a character other than "
                         "A-Z a-z 0-9 _ . / - (the hosts' roots in the inventory could not "
                         "name it)")
    check_lab_possible()
    if (directory / STATE).exists():
        raise InputError(f"lab: {directory} already holds a lab; run `nictune lab down "
                         f"--dir {directory}` first")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InputError(f"lab: --dir: {directory} is not an empty directory (the lab "
                         "writes keys, an inventory and hosts' files there, and `lab down` "
                         "removes them): give a new or empty one")
    names = ["sender"] + [f"rx{k}" for k in range(1, hosts)]
    existing = set(_run(["ip", "netns", "list"]).stdout.split())
    clash = [f"nt{ident}-{n}" for n in [*names, "mgmt"] if f"nt{ident}-{n}" in existing]
    if clash:
        raise InputError(f"lab: namespace {clash[0]} exists already (lab id {ident} in use); "
                         "use another --dir or --prefix, or `nictune lab down` the old one")
    directory.mkdir(parents=True, exist_ok=True)
    a = _octet(ident)
    lab = Lab(directory, ident, [], [])
    for i, name in enumerate(names):
        root = directory / "hosts" / name / "root"
        lab.hosts.append(LabHost(name, f"nt{ident}-{name}", f"10.{a}.0.{i + 1}", str(root),
                                 sshd_config=str(directory / "hosts" / name / "sshd_config")))
    try:  # claim the directory: of two `up`s into it, the second stops here, touching nothing
        os.close(os.open(directory / STATE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        raise InputError(f"lab: {directory} already holds a lab; run `nictune lab down "
                         f"--dir {directory}` first") from None
    lab._save()  # from here on `lab down` can clean up whatever this lab made
    try:
        _build(lab, a)
    except BaseException as exc:
        _teardown(lab)  # (this up's own record, not what lab.json may say by now)
        if isinstance(exc, OSError):  # (a file the lab could not write)
            raise RunError(f"lab: {exc}") from None
        raise
    return lab


def _add_netns(lab: Lab, netns: str) -> None:
    """`ip netns add`, recorded before it runs (a Ctrl-C during it leaves nothing
    unrecorded) and unrecorded if the name was taken: a failed `up` deletes only what it
    added, not a namespace of that name another lab made in the meantime."""
    lab.made.append(netns)
    lab._save()
    try:
        _run(["ip", "netns", "add", netns])
    except RunError as exc:
        if "File exists" in str(exc):
            lab.made.remove(netns)
            lab._save()
        raise


def _build(lab: Lab, a: int) -> None:
    d = lab.dir
    sender = lab.hosts[0]
    mgmt, client = lab.mgmt_netns, f"10.{a}.0.254"
    _add_netns(lab, mgmt)
    _run(["ip", "-n", mgmt, "link", "set", "lo", "up"])
    _run(["ip", "-n", mgmt, "addr", "add", f"{client}/32", "dev", "lo"])
    for h in lab.hosts:
        _add_netns(lab, h.netns)
        ns = ["ip", "-n", h.netns]
        _run([*ns, "link", "set", "lo", "up"])
        peer = f"m-{h.name}"
        _run(["ip", "link", "add", peer, "netns", mgmt, "type", "veth", "peer", "name",
              "mgmt0", "netns", h.netns])
        _run([*ns, "addr", "add", f"{h.address}/32", "dev", "mgmt0"])
        _run([*ns, "link", "set", "mgmt0", "up"])
        _run([*ns, "route", "add", f"{client}/32", "dev", "mgmt0"])
        _run(["ip", "-n", mgmt, "link", "set", peer, "up"])
        _run(["ip", "-n", mgmt, "route", "add", f"{h.address}/32", "dev", peer, "src", client])
    for k, rx in enumerate(lab.hosts[1:], start=1):
        link = LabLink(rx.name, f"{rx.name}-veth0", f"veth-{rx.name}", f"10.{a}.{k}.1",
                       "veth0", f"10.{a}.{k}.2")
        _run(["ip", "link", "add", link.sender_iface, "netns", sender.netns, "type", "veth",
              "peer", "name", link.receiver_iface, "netns", rx.netns])
        for host, iface, addr in ((sender, link.sender_iface, link.sender_address),
                                  (rx, link.receiver_iface, link.receiver_address)):
            _run(["ip", "-n", host.netns, "addr", "add", f"{addr}/24", "dev", iface])
            _run(["ip", "-n", host.netns, "link", "set", iface, "up"])
        sender.nics[f"sender-{link.sender_iface}"] = link.sender_iface
        rx.nics[link.nic] = link.receiver_iface
        lab.links.append(link)
    client_pub = _keygen(d / "id_ed25519", f"nictune-lab-{lab.id}")
    _write(d / "authorized_keys", client_pub + "\n", 0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    known = []
    for h in lab.hosts:
        hdir = Path(h.sshd_config).parent
        Path(h.root).mkdir(parents=True, exist_ok=True)
        pub = _keygen(hdir / "ssh_host_ed25519_key", f"{h.name}@nictune-lab-{lab.id}")
        known.append(f"{h.address} {' '.join(pub.split()[:2])}")
        _write(Path(h.sshd_config), SSHD_CONFIG.format(
            name=h.name, netns=h.netns, address=h.address,
            hostkey=hdir / "ssh_host_ed25519_key", pidfile=hdir / "sshd.pid",
            authorized=d / "authorized_keys"), 0o600)
        h.sshd_pid = _start_sshd(h)
        lab._save()
    _write(d / "known_hosts", "\n".join(known) + "\n", 0o600)
    _write(d / "inventory.yaml", yaml.safe_dump(_inventory(lab), sort_keys=False))
    _write(d / "config.yaml", yaml.safe_dump(_config(lab), sort_keys=False))
    lab._save()


def _inventory(lab: Lab) -> dict[str, Any]:
    return {
        "defaults": {"user": "root", "port": 22, "key_file": "id_ed25519",
                     "known_hosts": "known_hosts", "sudo": False},
        "hosts": {h.name: {"address": h.address, "netns": lab.mgmt_netns, "root": h.root,
                           "nics": dict(h.nics)} for h in lab.hosts},
    }


def _config(lab: Lab) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    receivers = lab.hosts[1:]
    config: dict[str, Any] = {
        "hosts": {h.name: {"cores": cores} for h in lab.hosts},
        "nics": {},
        "transmissions": [],
    }
    for k, link in enumerate(lab.links):
        config["nics"][link.nic] = {"host": link.receiver, "link": "10Gbit/s",
                                    "ring_slots": 4096, "max_ring_slots": 32768}
        size, packet, rate, arrival = TRANSMISSIONS[k % len(TRANSMISSIONS)]
        config["transmissions"].append({
            "id": f"t-{link.receiver}", "nic": link.nic, "size": size,
            "packet_size": packet, "rate": rate, "arrival": arrival,
            "default": {"mode": "watermark", "watermark": 128, "watermark_timeout": "500ms",
                        "ring_slots": 4096},
        })
    assert len(receivers) == len(config["transmissions"])
    return config


def load_lab(directory: str | Path) -> Lab:
    """The lab recorded in DIR/lab.json (InputError when there is none)."""
    directory = Path(directory).resolve()
    try:
        raw = json.loads((directory / STATE).read_text())
        lab = Lab(directory, raw["id"], [LabHost(**h) for h in raw["hosts"]],
                  [LabLink(**x) for x in raw["links"]])
        # (a lab.json of an earlier nictune has no "made": all its names are its own)
        lab.made = raw["made"] if "made" in raw else [*lab.netns_names()]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        raise InputError(f"lab: no lab in {directory} ({STATE} missing or unreadable)") \
            from None
    # `lab down` kills what runs in these namespaces and deletes them: only a lab's own
    # names (nt<id>-sender, nt<id>-rx<k>) are taken from the file
    ours = isinstance(lab.id, str) and PREFIX.match(lab.id) and all(
        isinstance(h.name, str) and LAB_HOST.match(h.name)
        and h.netns == f"nt{lab.id}-{h.name}" and type(h.sshd_pid) is int
        for h in lab.hosts) and isinstance(lab.made, list) and all(
        isinstance(n, str) and n in lab.netns_names() for n in lab.made)
    if not ours:
        raise InputError(f"lab: {directory / STATE} names namespaces or processes that are "
                         "not a lab's own; not touching them")
    return lab


def _delete_netns(names: list[str]) -> list[str]:
    """Kill what runs in these namespaces and delete them; returns what was removed."""
    existing = set(_run(["ip", "netns", "list"]).stdout.split())
    removed = []
    for netns in names:
        if netns in existing:
            # Anything still inside our namespace was started through our sshd
            # (sessions, on-host restore timers): ours to stop.
            for pid in _netns_pids(netns):
                if _in_netns(pid, netns):
                    _kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 2
            while any(process_alive(p) for p in _netns_pids(netns)) and \
                    time.monotonic() < deadline:
                time.sleep(0.02)
            _run(["ip", "netns", "del", netns], check=False)
            removed.append(f"netns {netns}")
    return removed


def lab_down_prefix(ident: str) -> list[str]:
    """Tear down the namespaces of lab `ident` (nt<id>-sender, -rxK, -mgmt) and what runs
    in them, without its directory (gone, or unknown); returns what was removed."""
    if not PREFIX.match(ident):
        raise InputError(f"lab: --prefix: expected 1-8 of a-z 0-9, got {ident!r}")
    own = re.compile(rf"^nt{ident}-(?:sender|rx[1-9][0-9]{{0,2}}|mgmt)\Z")
    names = [n for n in _run(["ip", "netns", "list"]).stdout.split() if own.match(n)]
    if not names:
        raise InputError(f"lab: no namespace of lab {ident} (nt{ident}-…) exists")
    return _delete_netns(sorted(names, key=lambda n: n.endswith("-mgmt")))


def lab_down(directory: str | Path) -> list[str]:
    """Tear the lab down; returns what was removed. Only its own processes are killed."""
    return _teardown(load_lab(directory))


def _teardown(lab: Lab) -> list[str]:
    """Stop `lab`'s sshds, delete the namespaces it made and its files (see `lab_down`)."""
    for h in lab.hosts:
        if h.sshd_pid and h.netns in lab.made and _in_netns(h.sshd_pid, h.netns):
            _stop(h.sshd_pid)
    removed = _delete_netns(lab.made)
    d = lab.dir
    for name in ("inventory.yaml", "config.yaml", "known_hosts", "id_ed25519",
                 "id_ed25519.pub", "authorized_keys", STATE):
        if (d / name).exists():
            (d / name).unlink()
            removed.append(str(d / name))
    for sub in ("hosts", ".nictune"):
        if (d / sub).exists():
            shutil.rmtree(d / sub)
            removed.append(str(d / sub))
    if d.is_dir() and not any(d.iterdir()):
        d.rmdir()  # nothing of the user's in it
        removed.append(str(d))
    return removed


@contextlib.contextmanager
def lab_hosts(directory: str | Path, hosts: int = 3, prefix: str | None = None) -> Iterator[Lab]:
    """`with lab_hosts(tmp_path, hosts=2) as lab:` — a lab that is torn down afterwards,
    SIGTERM included: in a main thread that left SIGTERM at its default, it stops the
    block as Ctrl-C does (a benchmark killed by `timeout` or a CI runner left its
    namespaces and sshds behind)."""
    with _sigterm_interrupts():
        lab = lab_up(directory, hosts=hosts, prefix=prefix)
        try:
            yield lab
        finally:
            lab_down(directory)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in this process (not in a forked child) while the
    block runs, where SIGTERM is at its default in the main thread; else nothing."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    pid = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != pid:  # (a forked child: die as usual)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
