"""A thin SSH connection (paramiko): run a command, read and write files.

Host keys are verified against the inventory's `known_hosts`: an unknown key is refused
unless the caller passes `trust_on_first_use` (the key is then added to the file); a
changed key is always refused. Only key authentication is used. Every command has a
timeout; stdout and stderr are drained together so a chatty command cannot deadlock.
When the host says `sudo: true` commands run under `sudo -n` (never prompting).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shlex
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko
from paramiko.hostkeys import InvalidHostKey

from nictune.deploy.inventory import HostInventory
from nictune.errors import RunError

CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30.0
CLOSE_TIMEOUT = 5.0  # s for a timed-out command's channel to close before the session goes
_CLONE_NEWNET = 0x40000000
# paramiko logs a traceback when a peer resets the connection; we report it ourselves.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostError(RunError):
    """A host could not be reached or refused us; the message says why."""

    def __init__(self, host: str, reason: str):
        super().__init__(f"{host}: {reason}")
        self.host, self.reason = host, reason


class CommandTimeout(HostError):
    """A remote command did not finish in time (the channel was closed)."""


class ConnectionLost(HostError):
    """The SSH session broke while a command ran."""


@dataclass(frozen=True)
class CommandResult:
    cmd: str
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def error_line(self) -> str:
        """The first meaningful line of stderr (or stdout), for reports."""
        for text in (self.stderr, self.stdout):
            lines = [x.strip() for x in text.splitlines() if x.strip()]
            if lines:
                return " ".join(lines[:2])
        return f"exit code {self.rc}"


def command_line(cmd: str | Sequence[str]) -> str:
    """A shell command from a string (used as is) or an argv list (each item quoted)."""
    return cmd if isinstance(cmd, str) else shlex.join(str(x) for x in cmd)


def _socket_in_netns(netns: str, address: str, port: int, timeout: float) -> socket.socket:
    """A TCP socket created inside network namespace `netns` and connected (lab hosts).

    A socket keeps the namespace it was created in, so a short-lived thread enters the
    namespace (`setns`, needs root), creates the socket and leaves; nothing else in the
    process changes namespace.
    """
    box: dict[str, object] = {}

    def worker() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{netns}") as ns:
                if libc.setns(ns.fileno(), _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
                try:
                    family = socket.AF_INET6 if ":" in address else socket.AF_INET
                    box["sock"] = socket.socket(family, socket.SOCK_STREAM)
                finally:
                    libc.setns(own.fileno(), _CLONE_NEWNET)
        except OSError as exc:
            box["error"] = exc

    thread = threading.Thread(target=worker, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if "error" in box:
        raise OSError(f"cannot enter network namespace {netns}: {box['error']}")
    sock = box["sock"]
    assert isinstance(sock, socket.socket)
    sock.settimeout(timeout)
    try:
        sock.connect((address, port))
    except OSError:
        sock.close()
        raise
    return sock


def _known_hosts_error(exc: Exception) -> str:
    """One line for a known_hosts file paramiko cannot load."""
    if isinstance(exc, InvalidHostKey):
        return f"malformed key in line {exc.line.strip()[:80]!r}"
    return _reason(exc)


def _short(line: str) -> str:
    """A command for a message: its first line, at most 80 characters (the probe's script
    is dozens of lines)."""
    first = line.strip().splitlines()[0] if line.strip() else ""
    more = len(first) > 80 or first != line.strip()
    return repr(first[:80] + ("…" if more else ""))


def _reason(exc: BaseException) -> str:
    """An OS or SSH error in a few words: its strerror, message or type."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class _TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
    """Accept an unknown key and record it in known_hosts (explicitly requested only)."""

    def __init__(self, path: str):
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        try:
            with open(self.path, "a") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        except OSError as exc:  # (refused: a key that cannot be recorded is not trusted)
            raise paramiko.SSHException(f"cannot record the host key in {self.path}: "
                                        f"{_reason(exc)}") from None
        client.get_host_keys().add(hostname, key.get_name(), key)


class Connection:
    """One SSH session to one inventory host. Use as a context manager."""

    def __init__(self, host: HostInventory, *, trust_on_first_use: bool = False,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 command_timeout: float = COMMAND_TIMEOUT):
        self.host = host
        self.trust_on_first_use = trust_on_first_use
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._client: paramiko.SSHClient | None = None

    # ------------------------------------------------------------------ connection
    def connect(self) -> Connection:
        h = self.host
        client = paramiko.SSHClient()
        known = str(h.known_hosts)
        if h.known_hosts.is_file():
            try:
                client.load_host_keys(known)
            except (OSError, paramiko.SSHException, InvalidHostKey) as exc:
                raise HostError(h.name, f"cannot read known_hosts {known}: "
                                        f"{_known_hosts_error(exc)}") from None
        client.set_missing_host_key_policy(
            _TrustOnFirstUse(known) if self.trust_on_first_use else paramiko.RejectPolicy())
        sock = None
        started = time.monotonic()
        try:
            if h.netns:
                sock = _socket_in_netns(h.netns, h.address, h.port, self.connect_timeout)
            client.connect(
                h.address, port=h.port, username=h.user, key_filename=str(h.key_file),
                timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout, allow_agent=False, look_for_keys=False,
                sock=sock)
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostError(h.name, f"host key CHANGED for {h.address} (known_hosts {known} "
                                    f"has a different {exc.expected_key.get_name()} key): "
                                    "refused; a possible man-in-the-middle") from None
        except paramiko.SSHException as exc:
            client.close()
            text = str(exc)
            if "not found in known_hosts" in text:
                raise HostError(h.name, f"unknown host key for {h.address} (not in "
                                        f"{known}): refused; pass --trust-on-first-use to "
                                        "accept and record it") from None
            if isinstance(exc, paramiko.AuthenticationException):
                raise HostError(h.name, f"authentication failed for {h.user}@{h.address} "
                                        f"with key {h.key_file}") from None
            if text == "No existing session" or text.startswith(
                    "Error reading SSH protocol banner"):  # (the handshake ended: timed
                # out, or the server closed the connection during it; which of the two
                # messages paramiko gives for a silent server is a race between its threads)
                raise HostError(h.name, f"ssh handshake with {h.address}:{h.port} " + (
                    f"did not complete within {self.connect_timeout:g} s"
                    if time.monotonic() - started >= self.connect_timeout else
                    "ended: the server closed the connection")) from None
            raise HostError(h.name, f"ssh: {text or type(exc).__name__}") from None
        except (OSError, EOFError) as exc:
            client.close()
            reason = "connect timeout" if isinstance(exc, TimeoutError | socket.timeout) else \
                _reason(exc)
            raise HostError(h.name, f"cannot connect to {h.address}:{h.port}: {reason}") \
                from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(5)
        self._client = client
        return self

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _session_alive(self) -> bool:
        """Whether the session still runs after a channel closed without an exit status.
        (paramiko closes a dying transport's channels just before marking it inactive:
        a moment's wait tells the two apart.)"""
        time.sleep(0.05)
        transport = self._client.get_transport() if self._client is not None else None
        return transport is not None and transport.is_active()

    def abort(self) -> None:
        """Drop a broken session at once. SO_LINGER 0 discards data the host has not
        acknowledged, so a command sent while the link was down can never be delivered
        late — after the link comes back and the timer has restored the host."""
        client, self._client = self._client, None
        if client is None:
            return
        sock = getattr(client.get_transport(), "sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()

    def __enter__(self) -> Connection:
        return self if self._client is not None else self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reconnect_if_lost(self) -> Connection:
        """A new session if the last one was lost (aborted) or closed: for clean-up and
        restore after a failure. (A deploy never retries on its own: see `abort`.)"""
        return self if self._client is not None else self.connect()

    @property
    def connected(self) -> bool:
        """False before `connect`, after `close`, and once a lost session was aborted."""
        return self._client is not None

    @property
    def client(self) -> paramiko.SSHClient:
        if self._client is None:
            raise HostError(self.host.name, "not connected")
        return self._client

    # ------------------------------------------------------------------ commands
    def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
            sudo: bool | None = None, stdin: bytes | None = None,
            check: bool = False) -> CommandResult:
        """Run `cmd` (a shell string, or an argv list that is quoted item by item)."""
        line = command_line(cmd)
        use_sudo = self.host.sudo if sudo is None else sudo
        # sudo drops $SSH_CONNECTION; pass it on as NICTUNE_SSH (the probe needs it)
        full = (f'sudo -n env NICTUNE_SSH="$SSH_CONNECTION" sh -c {shlex.quote(line)}'
                if use_sudo else line)
        limit = self.command_timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            channel = self._start(full, stdin, started + limit, limit, line)
            out, err = bytearray(), bytearray()
            while True:
                # sshd may send the exit status before the last output: done only at EOF.
                # (Sampled before the buffers are read: paramiko's thread feeds the last
                # output, then EOF and close, while this loop runs; ended-then-empty means
                # nothing more can come, empty-then-ended could miss the last data.)
                ended = channel.closed or (channel.eof_received and
                                           channel.exit_status_ready())
                busy = False
                while channel.recv_ready():
                    out += channel.recv(65536)
                    busy = True
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    busy = True
                if ended and not busy:
                    break
                if time.monotonic() - started > limit:
                    # (closing waits for a key exchange under way: on a dead link, 30 s)
                    self._within(CLOSE_TIMEOUT, channel.close)
                    raise CommandTimeout(self.host.name,
                                         f"command timed out after {limit:g} s: {line[:120]}")
                if not busy:
                    channel.status_event.wait(0.01)
            rc = channel.recv_exit_status() if channel.exit_status_ready() else -1
            self._within(CLOSE_TIMEOUT, channel.close)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.abort()
            raise ConnectionLost(self.host.name, f"connection lost running {_short(line)}: "
                                                 f"{_reason(exc)}") from None
        if rc == -1 and self._session_alive():
            # sshd closed the channel with an exit signal, which paramiko does not keep:
            # the command was killed (an OOM kill), the session is fine
            err[:0] = b"killed by a signal (no exit status)\n"
        elif rc == -1:
            self.abort()
            raise ConnectionLost(self.host.name, f"connection lost running {_short(line)}")
        result = CommandResult(line, rc, out.decode(errors="replace"),
                               err.decode(errors="replace"), time.monotonic() - started)
        if check and not result.ok:
            raise HostError(self.host.name, f"{line[:120]!r} failed: {result.error_line()}")
        return result

    def _start(self, full: str, stdin: bytes | None, deadline: float, limit: float,
               line: str) -> paramiko.Channel:
        """Open a channel, ask for `full` on it and send its input, by `deadline` (of the
        command's `limit` s). paramiko waits for the exec request's answer without a
        timeout, and opening a channel waits up to 30 s for a key exchange under way: a
        link that went down hung a deploy until TCP gave up, with the request still queued
        to be delivered late; `_within` drops the session instead. No exec request is sent
        once the deadline has passed. A command that ends without reading all its input (a
        refused copy) closes the channel under the send: its exit status and stderr then
        say why."""
        opened: list[paramiko.Channel] = []
        started = False

        def send() -> None:
            nonlocal started
            transport = self.client.get_transport()
            assert transport is not None
            # (its own timeout a backstop: the watchdog's drop ends the wait first)
            channel = transport.open_session(
                timeout=max(deadline - time.monotonic(), 0.0) + CLOSE_TIMEOUT)
            opened.append(channel)
            if time.monotonic() >= deadline:
                return
            channel.exec_command(full)
            started = True
            if stdin is not None:
                try:
                    channel.sendall(stdin)
                except (paramiko.SSHException, OSError):
                    if not channel.closed:
                        raise
            if not channel.closed:
                channel.shutdown_write()

        expired = self._within(deadline - time.monotonic(), send)
        if expired or not started:
            self.abort()
            raise CommandTimeout(self.host.name, (
                "the host did not take the command's input" if started else
                "the host did not start the command") + f" within {limit:g} s: {line[:120]}")
        return opened[0]

    def _within(self, seconds: float, step: Callable[[], None]) -> bool:
        """Run `step`; if it has not returned after `seconds`, drop the session (`abort`:
        SO_LINGER 0, so nothing queued is delivered after the guard timer restored the
        host), which ends it. Whether that happened. Closing a channel alone is not
        enough: a send stuck on a dead link holds the transport's send lock, which the
        channel's close message waits for."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            with contextlib.suppress(Exception):  # (the transport may be dying itself)
                self.abort()

        watchdog = threading.Timer(max(seconds, 0.0), expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            step()
        except (paramiko.SSHException, OSError, EOFError):
            if not expired.is_set():
                raise
        finally:
            watchdog.cancel()
            watchdog.join()  # (an expiry under way has dropped the session when it returns)
        if expired.is_set():
            self.abort()
        return expired.is_set()

    # ------------------------------------------------------------------ files
    def read_file(self, path: str, *, missing_ok: bool = True) -> str | None:
        """The text of a remote file (None when it does not exist and `missing_ok`)."""
        q = shlex.quote(path)
        res = self.run(f"if [ -e {q} ]; then cat {q}; else exit 3; fi")
        if res.rc == 3 and missing_ok:
            return None
        if not res.ok:
            raise HostError(self.host.name, f"cannot read {path}: {res.error_line()}")
        return res.stdout

    def put(self, local: str, remote: str) -> None:
        """Copy a local file to the host as the login user (files it may write), as a
        command's input: within the command timeout like any command (paramiko's SFTP
        waits for its answers without one); a failure is a HostError naming both paths."""
        try:
            data = Path(local).read_bytes()
        except OSError as exc:
            raise HostError(self.host.name, f"copy {local} -> {remote} failed: "
                                            f"{exc.strerror or exc}") from None
        res = self.run(["sh", "-c", 'cat > "$1"', "sh", remote], sudo=False, stdin=data)
        if not res.ok:
            raise HostError(self.host.name, f"copy {local} -> {remote} failed: "
                                            f"{res.error_line()}")
