"""Reading files a user names, defensively: regular file, bounded size, UTF-8, bounded YAML.

Every file the exporter reads on a user's behalf (``--config.file``, the counters CSV, the web
config, certificates and keys) goes through :func:`read_text`: it never blocks on a FIFO or a
device (opened non-blocking, then checked to be a regular file), never reads more than a limit
(``/dev/zero``, a 10 GB file), and turns undecodable bytes into one line naming the byte offset.
:func:`load_yaml` bounds nesting depth and alias expansion before PyYAML builds anything, so an
alias bomb or a recursive alias is one error line instead of a hang or a traceback.
"""

from __future__ import annotations

import os
import stat
from typing import Any

#: Largest file read (bytes); config files and certificate bundles are far smaller.
MAX_FILE_BYTES = 1 << 20
#: Deepest nesting of YAML mappings and sequences accepted.
MAX_YAML_DEPTH = 32
#: Most nodes a YAML document may have once its aliases are expanded.
MAX_YAML_NODES = 10_000
#: Longest piece of a user's value quoted back in an error message.
QUOTE_CHARS = 80


class FileProblem(ValueError):
    """A file cannot be used; the message is one line saying why (without the file's name)."""


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of ``value`` as text, cut to ``limit`` characters with the full length said."""
    text = str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; :class:`FileProblem` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise FileProblem(f"cannot be read: {err.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileProblem(f"is {_kind(mode)}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise FileProblem(f"cannot be read: {err.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileProblem(f"is larger than {limit // 1024} KiB")
    return b"".join(chunks)


def read_text(path: str, limit: int = MAX_FILE_BYTES) -> str:
    """A regular file of at most ``limit`` bytes decoded as UTF-8 (a leading BOM is dropped)."""
    data = read_bytes(path, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileProblem(f"is not UTF-8 text (byte {err.start} is 0x{data[err.start]:02x})") from None
    if "\x00" in text:
        raise FileProblem(f"is not text (a NUL character at offset {text.index(chr(0))})")
    return text.removeprefix("\ufeff")


def _check_events(text: str) -> None:
    """Walk PyYAML's event stream (no recursion, nothing built) bounding depth and alias expansion."""
    sizes: dict[str, int] = {}  # anchor → expanded node count
    stack: list[list[Any]] = []  # open collections: [anchor, node count]
    total = 0
    import yaml  # imported here: PyYAML costs ~3 MiB of RSS; most hosts never read a YAML file

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:
                if any(entry[0] == event.anchor for entry in stack):
                    raise FileProblem(f"YAML alias *{str(event.anchor)[:40]} refers to itself")
                raise FileProblem(f"YAML alias *{str(event.anchor)[:40]} has no anchor")
            added = sizes[event.anchor]
        elif isinstance(event, yaml.ScalarEvent):
            added = 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_YAML_DEPTH:
                raise FileProblem(f"YAML is nested deeper than {MAX_YAML_DEPTH} levels")
            continue
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, added = stack.pop()
            if anchor is not None:
                sizes[anchor] = added
            if stack:
                stack[-1][1] += added
            continue
        else:
            continue
        total += added
        if stack:
            stack[-1][1] += added
        if total > MAX_YAML_NODES:
            raise FileProblem(f"YAML expands to more than {MAX_YAML_NODES} values (an alias bomb?)")


def load_yaml(text: str) -> Any:
    """Parse one YAML document with the safe loader after bounding depth and alias expansion."""
    import yaml  # imported here: see _check_events

    try:
        _check_events(text)
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise FileProblem(f"{str(problem)[:QUOTE_CHARS]}{where}; fix the YAML syntax") from None
    except RecursionError:  # belt and braces: the event check bounds depth before PyYAML recurses
        raise FileProblem(f"YAML is nested deeper than {MAX_YAML_DEPTH} levels") from None
