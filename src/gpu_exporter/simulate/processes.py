"""Names of a scenario file's processes, for ``--simulate FILE`` in place of ``/proc``.

A scenario's pids are invented: looking them up in this machine's ``/proc`` would show (and leak) the
names and owners of whatever runs here under those pids (pid 1 is this host's init). So a scenario
without a simulated ``/proc`` of its own names its processes itself: ``process`` is the scenario's
``gpuN.process.K.name`` (what ``nvmlSystemGetProcessName`` answers for the pid; absent where the
scenario gives none), ``user`` is empty (NVML has no owner) and no cgroup says a workload. The file
is read again when it changes, as the simulated library does.
"""

from __future__ import annotations

import os
import re

from gpu_exporter.attribution.procfs import ProcessFacts
from gpu_exporter.simulate.scenario import Scenario, parse

_PID = re.compile(r"^gpu([0-9]+)\.process\.([0-9]+)\.pid$")
_MAX_BYTES = 1 << 20


class ScenarioNames:
    """Process facts by pid from one scenario file (never from this host)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._stamp: tuple[int, int, int] | None = None
        self._names: dict[int, str] = {}

    def _reload(self) -> None:
        try:
            info = os.stat(self._path)
        except OSError:
            return  # keep what was read last, as the library does
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        if stamp == self._stamp:
            return
        try:
            with open(self._path, "rb") as file:
                scenario = parse(file.read(_MAX_BYTES).decode("utf-8", "replace"))
        except OSError:
            return
        self._stamp, self._names = stamp, _names(scenario)

    def facts(self, pid: int) -> ProcessFacts:
        """The scenario's name for ``pid`` (empty where it names none); no user, no workload."""
        self._reload()
        return ProcessFacts(self._names.get(pid, ""))


def _names(scenario: Scenario) -> dict[int, str]:
    """pid -> name, searched as nvmlSystemGetProcessName does: GPU by GPU, process by process."""
    found = []
    for key, value in scenario.entries.items():
        match = _PID.match(key)
        if match is not None and value.strip().isascii() and value.strip().isdigit():
            found.append((int(match[1]), int(match[2]), int(value), scenario.get(key.removesuffix("pid") + "name")))
    names: dict[int, str] = {}
    for _gpu, _k, pid, name in sorted(found, key=lambda entry: entry[:2]):
        if name:
            names.setdefault(pid, name)
    return names
