"""Process names and owners from a procfs tree (``--path.procfs``, default ``/proc``).

``process`` is the short name (``/proc/PID/comm``, never the command line, which may hold secrets)
and ``user`` the owner of ``/proc/PID`` (the real uid of ``/proc/PID/status``) as a name where the
user database resolves it, else the number: the exporter's own (``pwd``) or, with
``--path.passwd``, a passwd file (the host's ``/etc/passwd`` mounted into a container, whose own
database does not know the host's users). A pid whose entry is missing (it exited, or
the exporter does not share the host's PID namespace) gets empty names: absent, never wrong. A
lookup is cached per pid and start time (``/proc/PID/stat`` field 22), so a reused pid is looked
up again. Files are read with a size bound and decoded leniently: a hostile name cannot break a
scrape (the encoder escapes it).
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpu_exporter.attribution.cgroups import Workload
from gpu_exporter.attribution.cgroups import parse as parse_cgroups

_MAX_BYTES = 4096
_CACHE_MAX = 4096
_MAX_PASSWD_BYTES = 4 << 20


def _read(path: Path) -> str:
    with path.open("rb") as file:
        return file.read(_MAX_BYTES).decode("utf-8", "replace")


@dataclass(frozen=True)
class ProcessFacts:
    """What /proc says about one process: short name, user, and its workload from its cgroups."""

    name: str = ""
    user: str = ""
    workload: Workload = field(default_factory=Workload)


class FactsSource(Protocol):
    """Where process facts come from: a procfs tree, or (``--simulate FILE``) the scenario itself."""

    def facts(self, pid: int) -> ProcessFacts: ...


class ProcessNames:
    """Cached facts by pid (and start time) for one procfs root."""

    def __init__(self, root: Path = Path("/proc"), passwd: Path | None = None) -> None:
        self._root = root
        self._users = Users(passwd)
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
                if len(parts) > 1 and parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 10:
                    user = self._users.name(int(parts[1]))
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


class Users:
    """User names by uid: from a passwd file (``name:password:uid:...`` lines, read again when it
    changes) or, without one, from the exporter's own user database. An unknown uid is its number."""

    def __init__(self, passwd: Path | None = None) -> None:
        self._passwd = passwd
        self._stamp: tuple[int, int] | None = None
        self._names: dict[int, str] = {}

    def name(self, uid: int) -> str:
        if self._passwd is None:
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
        self._reload()
        return self._names.get(uid, str(uid))

    def _reload(self) -> None:
        assert self._passwd is not None
        try:
            info = self._passwd.stat()
            stamp = (info.st_mtime_ns, info.st_size)
            if stamp == self._stamp:
                return
            with self._passwd.open("rb") as file:
                text = file.read(_MAX_PASSWD_BYTES).decode("utf-8", "replace")
        except OSError:
            self._stamp, self._names = None, {}  # unreadable now: numbers, and try again next time
            return
        names: dict[int, str] = {}
        for line in text.splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and parts[2].isascii() and parts[2].isdigit() and parts[0] and not line.startswith("#"):
                names.setdefault(int(parts[2]), parts[0])
        self._stamp, self._names = stamp, names
