"""Process names and owners from a procfs tree (``--path.procfs``, default ``/proc``).

``process`` is the short name (``/proc/PID/comm``, never the command line, which may hold secrets)
and ``user`` the owner of ``/proc/PID`` (the real uid of ``/proc/PID/status``) as a name where the
exporter's user database resolves it, else the number. A pid whose entry is missing (it exited, or
the exporter does not share the host's PID namespace) gets empty names: absent, never wrong. A
lookup is cached per pid and start time (``/proc/PID/stat`` field 22), so a reused pid is looked
up again. Files are read with a size bound and decoded leniently: a hostile name cannot break a
scrape (the encoder escapes it).
"""

from __future__ import annotations

import pwd
from pathlib import Path

from gpu_exporter import model
from gpu_exporter.backends.base import RawReading
from gpu_exporter.model import Entity

_MAX_BYTES = 4096
_CACHE_MAX = 4096


def _read(path: Path) -> str:
    with path.open("rb") as file:
        return file.read(_MAX_BYTES).decode("utf-8", "replace")


class ProcessNames:
    """Cached (start time, name, user) by pid for one procfs root."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self._root = root
        self._cache: dict[int, tuple[str, str, str]] = {}

    def lookup(self, pid: int) -> tuple[str, str]:
        """(short name, user) of ``pid``; empty strings where /proc has no answer."""
        base = self._root / str(pid)
        try:
            stat = _read(base / "stat")
        except OSError:
            self._cache.pop(pid, None)
            return "", ""
        fields = stat.rpartition(")")[2].split()
        started = fields[19] if len(fields) > 19 else ""
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1], cached[2]
        try:
            name = _read(base / "comm").strip()
            status = _read(base / "status")
        except OSError:
            return "", ""
        user = ""
        for line in status.splitlines():
            if line.startswith("Uid:"):
                parts = line.split()
                if len(parts) > 1 and parts[1].isdigit():
                    user = _user(int(parts[1]))
                break
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[pid] = (started, name, user)
        return name, user

    def name(self, reading: RawReading) -> None:
        """Give every process entity of ``reading`` its ``process`` and ``user`` labels."""
        if not any(entity.kind == "process" for entity in reading.raw):
            return
        named: dict[Entity, dict[str, float]] = {}
        for entity, values in reading.raw.items():
            pid = dict(entity.labels).get("pid", "")
            if entity.kind == "process" and pid.isdigit():
                entity = model.named(entity, *self.lookup(int(pid)))
            named[entity] = values
        reading.raw = named


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
