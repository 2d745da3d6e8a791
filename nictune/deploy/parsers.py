"""Parsers for what hosts print: `ethtool -i/-c/-g/-l/-k` (text of every ethtool
generation, and `--json`), and `/proc/interrupts`.

Unsupported capabilities are recognised by their error text ("Operation not supported",
"netlink error: Operation not supported", the old ioctl wording split over two lines) and
give `None`; a field printed as `n/a` is `None` (the NIC lacks that parameter). Text that
is neither is a `ParseError` naming the command. Fixtures: ../shared/data/ethtool-samples.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nictune.errors import InputError

UNSUPPORTED = re.compile(r"Operation not supported|not supported|Not supported")
MAX_CPUS = 8192  # the kernel's largest NR_CPUS: CPU numbers and masks beyond it are garbage
# what reading garbled host output can raise besides ParseError (the probe retries, a
# read-back after a change restores the host)
UNREADABLE = (ValueError, TypeError, KeyError, IndexError, ArithmeticError)


class ParseError(InputError):
    """Remote output that is neither a known format nor an unsupported-capability error."""


def unsupported(text: str) -> bool:
    """True when ethtool said the capability is absent."""
    return bool(UNSUPPORTED.search(text))


def _value(raw: str) -> int | bool | str | None:
    """A field value: `n/a` -> None, on/off -> bool, leading integer -> int.

    Only the first token counts, so annotations pasted after a value are ignored.
    """
    token = raw.strip().split()[0] if raw.strip() else ""
    if token in ("", "n/a"):
        return None
    if token in ("on", "off"):
        return token == "on"
    if is_count(token):
        if int(token) >= 2**32:
            raise ParseError(f"a count or time beyond 32 bits: {raw.strip()[:80]!r}")
        return int(token)
    if re.fullmatch(r"-[0-9]+", token):
        raise ParseError(f"a negative count or time: {raw.strip()[:80]!r}")
    return raw.strip()


def _key(raw: str) -> str:
    return re.sub(r"\s+", "-", raw.strip().lower())


def parse_driver_info(text: str) -> dict[str, str]:
    """`ethtool -i`: `driver`, `version`, `firmware-version`, `bus-info`, ...
    (`firmware-version: not supported` is a value, not an absent capability)."""
    if unsupported(text) and not re.search(r"^driver:", text, re.MULTILINE):
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    if "driver" not in out:
        raise ParseError(f"ethtool -i: no 'driver:' line in {text[:80]!r}")
    return out


def parse_coalesce(text: str) -> dict[str, int | bool | None] | None:
    """`ethtool -c`: {'adaptive-rx': bool|None, 'rx-usecs': int|None, ...}; None if absent."""
    if unsupported(text):
        return None
    out: dict[str, int | bool | None] = {}
    for line in text.splitlines():
        pair = re.match(r"^\s*(Adaptive|CQE mode)\s+RX:\s*(\S+)\s+TX:\s*(\S+)", line)
        if pair:
            prefix = "adaptive" if pair.group(1) == "Adaptive" else "cqe-mode"
            out[f"{prefix}-rx"] = _bool(pair.group(2))
            out[f"{prefix}-tx"] = _bool(pair.group(3))
            continue
        m = re.match(r"^\s*([a-z][a-z0-9-]*):\s*(\S*)", line)
        if m and not line.startswith("Coalesce parameters"):
            value = _value(m.group(2))
            if isinstance(value, str) and m.group(1) in ("rx-usecs", "rx-frames"):
                # (what nictune sets: a word there is garbled output, not "n/a")
                raise ParseError(f"ethtool -c: {m.group(1)}: expected a count or n/a, got "
                                 f"{m.group(2)[:40]!r}")
            out[m.group(1)] = value if not isinstance(value, str) else None
    if "rx-usecs" not in out:
        raise ParseError(f"ethtool -c: no 'rx-usecs' in {text[:80]!r}")
    return out


def _bool(token: str) -> bool | None:
    return None if token == "n/a" else token == "on"


def _sections(text: str, what: str) -> dict[str, dict[str, int | bool | str | None]]:
    """The 'Pre-set maximums' / 'Current hardware settings' blocks of -g and -l."""
    out: dict[str, dict[str, int | bool | str | None]] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Pre-set maximums"):
            section = out.setdefault("max", {})
        elif stripped.startswith("Current hardware settings"):
            section = out.setdefault("current", {})
        elif section is not None and ":" in stripped:
            key, _, value = stripped.partition(":")
            section[_key(key)] = _value(value)
    if not out:
        raise ParseError(f"ethtool {what}: no 'Pre-set maximums' or 'Current hardware "
                         f"settings' in {text[:80]!r}")
    out.setdefault("max", {})
    out.setdefault("current", {})
    return out


def parse_ring(text: str) -> dict[str, dict[str, Any]] | None:
    """`ethtool -g`: {'max': {'rx': 4096, ...}, 'current': {'rx': 256, ...}}; None if absent.

    A partial paste (only the maximums) gives an empty 'current'.
    """
    return None if unsupported(text) else _sections(text, "-g")


def parse_channels(text: str) -> dict[str, dict[str, Any]] | None:
    """`ethtool -l`: {'max': {'rx', 'tx', 'other', 'combined'}, 'current': {...}}."""
    return None if unsupported(text) else _sections(text, "-l")


def parse_features(text: str) -> dict[str, dict[str, bool | None]] | None:
    """`ethtool -k`: {name: {'active': bool, 'fixed': bool, 'requested': bool}}."""
    if unsupported(text):
        return None
    out: dict[str, dict[str, bool | None]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([a-z0-9][a-z0-9_-]*):\s*(on|off)\s*(\[(fixed|requested (on|off))\])?",
                     line)
        if not m:
            continue
        active = m.group(2) == "on"
        requested = active if m.group(5) is None else m.group(5) == "on"
        out[m.group(1)] = {"active": active, "fixed": m.group(4) == "fixed",
                           "requested": requested}
    if not out:
        raise ParseError(f"ethtool -k: no features in {text[:80]!r}")
    return out


# ----------------------------------------------------------------------------- JSON


Pairs = Callable[[list[tuple[str, Any]]], Any]


def load_json(text: str, pairs: Pairs | None = None, repair: bool = False) -> Any:
    """`ethtool --json` output (`pairs` builds each object from its key/value pairs, as
    json's object_pairs_hook); anything but whole JSON is a ParseError. With `repair`, for
    pasted outputs (often cut), a truncated document is read up to its last complete
    member — never for a live host's, where the features after the cut would count as
    gone and a rollback would skip them."""
    try:
        return json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        if not repair:
            raise ParseError(f"ethtool --json: not whole JSON: {text[:80]!r}") from None
    cuts = [i for i, ch in enumerate(text) if ch in "}]"]
    for cut in reversed(cuts[-200:]):
        prefix = text[:cut + 1]
        closers = _closers(prefix)
        if closers is None:
            continue
        try:
            return json.loads(prefix + closers, object_pairs_hook=pairs)
        except (ValueError, RecursionError):
            continue
    raise ParseError(f"ethtool --json: not JSON: {text[:80]!r}")


def _closers(prefix: str) -> str | None:
    """The brackets that close `prefix` (None if it is not a clean JSON prefix)."""
    stack: list[str] = []
    in_string = escape = False
    for ch in prefix:
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}" and (not stack or stack.pop() != ch):
            return None
    return None if in_string or not stack else "".join(reversed(stack))


def _json_object(text: str, what: str, pairs: Pairs | None = None,
                 repair: bool = False) -> dict[str, Any]:
    doc = load_json(text, pairs, repair)
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        return doc[0]
    if isinstance(doc, dict):
        return doc
    raise ParseError(f"ethtool --json {what}: expected a list with one object")


def parse_json_features(text: str, repair: bool = False) -> dict[str, dict[str, bool | None]]:
    """`ethtool --json -k`, same shape as `parse_features` (`repair`: see `load_json`)."""
    obj = _json_object(text, "-k", repair=repair)
    out = {}
    for name, value in obj.items():
        if isinstance(value, dict) and "active" in value:
            flags = {k: value.get(k) for k in ("active", "fixed", "requested")}
            if not all(v is None or isinstance(v, bool) for v in flags.values()) \
                    or flags["active"] is None:
                raise ParseError(f"ethtool --json -k: {name}: expected true/false, got {value}")
            out[name] = {"active": flags["active"], "fixed": bool(flags["fixed"]),
                         "requested": flags["requested"]}
    return out


def parse_json_ring(text: str, repair: bool = False) -> dict[str, dict[str, Any]]:
    """`ethtool --json -g`, same shape as `parse_ring` (keys `rx-max` -> max.rx)."""
    return _json_sections(_json_object(text, "-g", repair=repair), "-g")


def parse_json_channels(text: str, repair: bool = False) -> dict[str, dict[str, Any]]:
    """`ethtool --json -l` (keys omitted when unsupported)."""
    return _json_sections(_json_object(text, "-l", repair=repair), "-l")


_COUNTS = ("rx", "tx", "rx-mini", "rx-jumbo", "combined", "other")


def _json_value(option: str, key: str, value: Any) -> Any:
    """A value of `ethtool --json -g/-l` output as nictune reads it: numbers are whole and
    within 32 bits (no NaN, floats or negatives) and the counts are numbers; anything else
    is a ParseError."""
    number = is_u32(value)
    if (isinstance(value, float) or (is_int(value) and not number)
            or (key.removesuffix("-max") in _COUNTS and not number)):
        raise ParseError(f"ethtool --json {option}: {key}: unexpected value {value!r}")
    return value


def is_int(value: Any) -> bool:
    """An integer, not a boolean (JSON's `true` is a bool, and bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_u32(value: Any) -> bool:
    return is_int(value) and 0 <= value < 2**32


def _json_sections(obj: dict[str, Any], option: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"max": {}, "current": {}}
    for key, value in obj.items():
        if key == "ifname":
            continue
        value = _json_value(option, key, value)
        if key.endswith("-max"):
            out["max"][key[:-4]] = value
        else:
            out["current"][key] = value
    return out


_SWITCHES = ("adaptive-", "cqe-mode-")


def parse_json_coalesce(text: str, repair: bool = False) -> dict[str, int | bool | None]:
    """`ethtool --json -c` (ethtool >= 6.2): keys as in `parse_coalesce`. The switches
    (adaptive-*, cqe-mode-*) must be true/false and every other value a whole number within
    32 bits, or it is a ParseError (a string would be taken as state and written back by a
    restore). The DIM profile tables of newer ethtool (`rx-profile`, `tx-profile`: lists)
    are not knobs nictune sets and are left out."""
    obj = _json_object(text, "-c", _coalesce_keys, repair)
    out: dict[str, int | bool | None] = {}
    for key, value in obj.items():
        if key == "ifname" or (key.endswith("-profile") and isinstance(value, list)):
            continue
        switch = key.startswith(_SWITCHES)
        if not (isinstance(value, bool) if switch else is_u32(value)):
            want = "true or false" if switch else "a whole number"
            raise ParseError(f"ethtool --json -c: {key}: expected {want}, got "
                             f"{json.dumps(value)[:60]}")
        out[key] = value
    return out


def _coalesce_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of `ethtool --json -c` with its keys as ethtool >= 6.11 names them.

    ethtool 6.2-6.10 printed both switch pairs as "rx"/"tx" (json would keep only the
    last): the pair before the first number is adaptive-rx/tx, a pair after it
    cqe-mode-rx/tx. Some builds printed keys with the text's colon ("rx-usecs: ")."""
    out: dict[str, Any] = {}
    numbers = False
    for raw, value in pairs:
        key = raw.strip().rstrip(":").strip()
        if key in ("rx", "tx"):
            key = f"{'cqe-mode' if numbers else 'adaptive'}-{key}"
        numbers = numbers or is_int(value)
        out[key] = value
    return out


# ----------------------------------------------------------------------------- IRQs


@dataclass(frozen=True)
class IrqLine:
    irq: int
    counts: tuple[int, ...]
    chip: str
    name: str

    @property
    def actions(self) -> list[str]:
        """Handler names (a shared line lists several: 'uhci_hcd:usb4, radeon')."""
        return [a.strip() for a in self.name.split(",") if a.strip()]


_TRIGGER = re.compile(r"-(edge|level|fasteoi|simple)$")
_ARM_TRIGGERS = ("Edge", "Level")  # the GIC's trigger column, after the hwirq number


def cpu_columns(header: str) -> int | None:
    """How many CPUs a `CPU0 CPU1 ...` header names (None: the line is no such header)."""
    tokens = header.split()
    return len(tokens) if tokens and all(t.startswith("CPU") for t in tokens) else None


def parse_interrupts(text: str) -> list[IrqLine]:
    """Numbered lines of `/proc/interrupts` (with or without the CPU header line)."""
    lines = text.splitlines()
    ncpu = cpu_columns(lines[0]) if lines else None
    out = []
    for line in lines:
        m = re.match(r"^\s*(\d+):(.*)$", line)
        if not m:
            continue
        tokens = m.group(2).split()
        counts: list[int] = []
        while tokens and is_count(tokens[0]) and (ncpu is None or len(counts) < ncpu):
            counts.append(int(tokens.pop(0)))
        chip = tokens.pop(0) if tokens else ""
        if tokens and not _TRIGGER.search(chip) and _TRIGGER.search(tokens[0]):
            chip = f"{chip} {tokens.pop(0)}"  # x86: "PCI-MSI 49153-edge"
        elif len(tokens) > 1 and tokens[0].isdigit() and tokens[1] in _ARM_TRIGGERS:
            chip = f"{chip} {tokens.pop(0)} {tokens.pop(0)}"  # arm64: "ITS-MSI 16385 Edge"
        elif tokens and tokens[0] in _ARM_TRIGGERS:
            chip = f"{chip} {tokens.pop(0)}"
        out.append(IrqLine(int(m.group(1)), tuple(counts), chip, " ".join(tokens)))
    if not out and text.strip():
        raise ParseError(f"/proc/interrupts: no IRQ lines in {text[:80]!r}")
    return out


def irqs_of(lines: list[IrqLine], iface: str, bus_info: str = "",
            device: str = "") -> list[IrqLine]:
    """The IRQ lines of interface `iface` by handler name.

    Matches `iface` as a whole word (eth0, eth0-TxRx-0, i40e-eth0-TxRx-0, eth0-rx-1,
    eth4[0]; never eth00), the PCI bus address (mlx5_comp0@pci:0000:01:00.0,
    i40e-0000:01:00.0:misc) and the bus device name (virtio0-input.0). Prefer the
    kernel's own list (/sys/class/net/IFACE/device/msi_irqs) when the host has it.
    """
    word = re.compile(rf"(^|[-:\s]){re.escape(iface)}($|[-\[@:\s])")
    patterns = [word]
    if bus_info:
        patterns.append(re.compile(rf"(@pci:|^|[-\s]){re.escape(bus_info)}($|[:\s])"))
    if device:
        patterns.append(re.compile(rf"^{re.escape(device)}($|[-.])"))
    return [x for x in lines if any(p.search(a) for a in x.actions for p in patterns)]


def is_count(text: str) -> bool:
    """Only ASCII digits (`str.isdigit` also takes `²`, which `int` refuses)."""
    return re.fullmatch(r"[0-9]+", text) is not None


def count(text: str, where: str, error: type[Exception] = ParseError) -> int:
    """`text` as a count (ASCII digits only: `-1`, `+5` or `1_000` are garbled output);
    anything else raises `error` naming `where`."""
    if not is_count(text):
        raise error(f"{where}: expected a count, got {text[:40]!r}")
    return int(text)


def cpu_list(text: str) -> list[int]:
    """`0-3,6` -> [0, 1, 2, 3, 6] (smp_affinity_list format); CPUs up to MAX_CPUS. An
    empty list or part (`''`, `1,,2`) is refused: the kernel prints neither."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part.strip())
        if m is None or int(m.group(2) or m.group(1)) >= MAX_CPUS or (
                m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ParseError(f"not a CPU list: {text.strip()[:80]!r}")
        cpus.extend(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return sorted(set(cpus))


def hex_mask(text: str) -> int:
    """`00000000,00000002` -> 2 (rps_cpus / smp_affinity format)."""
    digits = text.strip().replace(",", "")
    if not re.fullmatch(r"[0-9a-fA-F]*", digits) or len(digits) > MAX_CPUS // 4:
        raise ParseError(f"not a CPU mask: {text.strip()[:80]!r}")
    return int(digits or "0", 16)
