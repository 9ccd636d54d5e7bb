"""What the harness reads from /proc: a process's CPU seconds and resident memory, the host's load."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of the whole process (all its threads, live and exited), in seconds.

    Fields 14 and 15 of ``/proc/PID/stat``; the kernel keeps their sum equal to the precise run
    time, reported in clock ticks (1/CLOCK_TICKS s).
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; fields[0] is field 3 (state)
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process, in seconds."""
    user, system = cpu_times(pid)
    return user + system


def rss_bytes(pid: int) -> int:
    """``VmRSS`` of ``/proc/PID/status``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def loadavg() -> tuple[float, float, float]:
    """1, 5 and 15 minute load averages."""
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)


@dataclass(frozen=True)
class HostTimes:
    """Host-wide CPU time from the ``cpu`` line of ``/proc/stat``, in seconds."""

    busy: float
    total: float


def host_times() -> HostTimes:
    """Busy (everything but idle and iowait) and total CPU seconds of all cores since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    idle = values[3] + values[4]
    return HostTimes(busy=(total - idle) / CLOCK_TICKS, total=total / CLOCK_TICKS)
