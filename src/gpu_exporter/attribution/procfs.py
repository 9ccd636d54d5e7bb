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
from dataclasses import dataclass, field
from pathlib import Path

from gpu_exporter.attribution.cgroups import Workload
from gpu_exporter.attribution.cgroups import parse as parse_cgroups

_MAX_BYTES = 4096
_CACHE_MAX = 4096


def _read(path: Path) -> str:
    with path.open("rb") as file:
        return file.read(_MAX_BYTES).decode("utf-8", "replace")


@dataclass(frozen=True)
class ProcessFacts:
    """What /proc says about one process: short name, user, and its workload from its cgroups."""

    name: str = ""
    user: str = ""
    workload: Workload = field(default_factory=Workload)


class ProcessNames:
    """Cached facts by pid (and start time) for one procfs root."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self._root = root
        self._cache: dict[int, tuple[str, ProcessFacts]] = {}

    def facts(self, pid: int) -> ProcessFacts:
        """What /proc says about ``pid``; empty where it has no answer."""
        base = self._root / str(pid)
        try:
            stat = _read(base / "stat")
        except OSError:
            self._cache.pop(pid, None)
            return ProcessFacts()
        fields = stat.rpartition(")")[2].split()
        started = fields[19] if len(fields) > 19 else ""
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1]
        try:
            name = _read(base / "comm").strip()
            status = _read(base / "status")
        except OSError:
            return ProcessFacts()
        try:
            workload = parse_cgroups(_read(base / "cgroup"))
        except OSError:
            workload = Workload()
        user = ""
        for line in status.splitlines():
            if line.startswith("Uid:"):
                parts = line.split()
                if len(parts) > 1 and parts[1].isdigit():
                    user = _user(int(parts[1]))
                break
        facts = ProcessFacts(name, user, workload)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[pid] = (started, facts)
        return facts

    def lookup(self, pid: int) -> tuple[str, str]:
        """(short name, user) of ``pid``; empty strings where /proc has no answer."""
        facts = self.facts(pid)
        return facts.name, facts.user


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
