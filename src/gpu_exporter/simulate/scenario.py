"""One scenario file, parsed: ``key = value`` lines (the test fake's format, documented in
``SCENARIO.md`` in this package and summarised in the README), and the rules for reading a value:
cycles ``a,b,c@P``, decimal or ``0x`` numbers, NVML error names.

Units are NVML's own (bytes, MHz, mW, mJ, %, °C, KB/s, ns): the file holds what the driver would
return. Parsing never fails: a line without ``=`` is skipped with a warning, as the C fake does;
:func:`problems` lists such lines for the ``--simulate`` check at start-up.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from dataclasses import dataclass, field

MAX_GPUS = 64
MAX_MIG = 8
MAX_PROCS = 64
MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in nvml.h 13.x

_INDEXED = re.compile(r"^(?:mig|process|nvlink)\.([0-9]+)\.(.*)$")
#: The largest scenario file read, at start and when it changes.
MAX_BYTES = 1 << 20
_GPU = re.compile(r"^gpu([0-9]+)\.(.*)$")
_FLOAT = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_HEX = re.compile(r"^0[xX][0-9a-fA-F]+$")


@dataclass
class GpuKeys:
    """What the keys say exists under ``gpuN.``: MIG devices K, processes K (with a pid), NVLinks L."""

    mig: set[int] = field(default_factory=set)
    processes: set[int] = field(default_factory=set)
    links: set[int] = field(default_factory=set)


@dataclass
class Scenario:
    """Keys → raw values (the last line of a repeated key wins), and the GPUs they mention."""

    entries: dict[str, str] = field(default_factory=dict)
    gpus: dict[int, GpuKeys] = field(default_factory=dict)
    stamp: tuple[int, int, int, int] | None = None  # device, inode, size, mtime in ns
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) without '='

    def get(self, key: str) -> str | None:
        return self.entries.get(key)


def _strip_comment(line: str) -> str:
    """``#`` opens a comment at the start of a line or after whitespace, so ``a#b`` is a value."""
    for i, char in enumerate(line):
        if char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def parse(text: str) -> Scenario:
    """The scenario in ``text``."""
    scenario = Scenario()
    for number, raw in enumerate(text.split("\n"), 1):
        line = _strip_comment(raw)
        key, sep, value = line.partition("=")
        if not sep:
            if line.strip():
                scenario.skipped.append((number, line.strip()))
            continue
        if key.strip():
            scenario.entries[key.strip()] = value.strip()
    for key in scenario.entries:
        match = _GPU.match(key)
        if match is None or int(match[1]) >= MAX_GPUS:
            continue
        keys = scenario.gpus.setdefault(int(match[1]), GpuKeys())
        rest = match[2]
        indexed = _INDEXED.match(rest)
        if indexed is None:
            continue
        k = int(indexed[1])
        if rest.startswith("mig.") and k < MAX_MIG:
            keys.mig.add(k)
        elif rest.startswith("process.") and k < MAX_PROCS and indexed[2] == "pid":
            keys.processes.add(k)
        elif rest.startswith("nvlink.") and k < MAX_LINKS:
            keys.links.add(k)
    return scenario


def stamp_of(path: str) -> tuple[int, int, int, int] | None:
    """What identifies one version of the file (a rewrite changes it), or None when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def load(path: str) -> Scenario:
    """Read and parse ``path`` (stamped before reading, so a change during the read is seen next time);
    raises OSError or UnicodeDecodeError when it cannot be read. Bounded as the first read at start
    (``builtins.resolve``): a regular file (opened without blocking, so a FIFO put in its place
    cannot hang the sampler) of at most :data:`MAX_BYTES`."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(descriptor, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_BYTES >> 20} MiB")
    scenario = parse(data.decode("utf-8"))
    scenario.stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    return scenario


def parse_float(text: str) -> float | None:
    """Decimal (with fraction or exponent) or ``0x`` hexadecimal; None otherwise."""
    if _HEX.match(text):
        return float(int(text, 16))
    if _FLOAT.match(text):
        value = float(text)
        return value if math.isfinite(value) else None
    return None


def parse_uint(text: str) -> int | None:
    """A non-negative integer: decimal, ``0x`` hex, or a decimal fraction cut off (``61.9`` → 61)."""
    if _HEX.match(text):
        return int(text, 16)
    if text.startswith("-"):
        return None
    if text.isascii() and text.isdigit():
        value = int(text)
        return value if value < 2**64 else None
    number = parse_float(text)
    if number is not None and 0 <= number < 2.0**64:
        return int(number)
    return None


def pick(value: str, t: float) -> str:
    """The element of a cycle ``a,b,c@P`` active at ``t`` seconds (``floor(t / P) mod n``); a value
    without a valid ``@P`` is returned whole."""
    body, at, period_text = value.rpartition("@")
    if at:
        period = parse_float(period_text.strip())
        if period is not None and period > 0:
            items = body.split(",")
            return items[int(t / period) % len(items)].strip()
    return value.strip()
