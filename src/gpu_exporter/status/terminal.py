"""``gpu-exporter snapshot`` as text: a host line, then one line per GPU (and MIG instance) in the
manner of gpustat, with problems on an indented line below their card.

``[0] NVIDIA H100 80GB HBM3 |  71°C,  97 % | 10240 / 81559 MiB | 612 / 700 W | python3/4242(root,8192M)``

With SM activity measured (the profiling collector), it follows GPU-Util: ``97 %, SM  35 %``. Each
allocation of the card (pod container, Slurm or HPC job) follows on a line of its own with what it used
since the exporter started (:func:`~gpu_exporter.status.usage.line`):
``    = job 77: 1.0 GPU-s, busy 0.6 s, 0.6 kJ, 8192 MiB``.
"""

from __future__ import annotations

import time
from typing import Any

from gpu_exporter.status.usage import line as usage_line
from gpu_exporter.status.view import paused_text

MIB = 1024**2

_RESET, _BOLD, _RED, _CYAN, _YELLOW = "\x1b[0m", "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[33m"


def _clean(text: object) -> str:
    """Names as printable text: control characters (a hostile process name's escapes) become ``?``."""
    return "".join(ch if ch.isprintable() else "?" for ch in str(text))


def _n(value: float | None, scale: float = 1.0, width: int = 0) -> str:
    return "?".rjust(width) if value is None else f"{value / scale:{width}.0f}"


def _process(proc: dict[str, Any]) -> str:
    name = _clean(proc["name"] or "?")
    user = _clean(proc["user"] or "?")
    where = f",{_clean(proc['pod'])}" if proc["pod"] else f",job {_clean(proc['job'])}" if proc["job"] else ""
    pid = "other" if proc["pid"] is None else proc["pid"]  # None: the processes folded past the limit
    return f"{name}/{_clean(pid)}({user},{_n(proc['memory_used_bytes'], MIB)}M{where})"


def render(status: dict[str, Any], color: bool = False) -> str:
    """The whole view; ``color`` adds ANSI colours (names bold, problems red)."""

    def paint(code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    why = str(status.get("backend_problem") or status["backend_reason"]).partition(": ")[0]
    state = "" if status["backend_up"] else f" (backend down: {_clean(why)})"
    lines = [
        f"{paint(_BOLD, _clean(status['hostname']))}  {time.strftime('%Y-%m-%d %H:%M:%S')}  "
        f"driver {_clean(status['driver_version'] or '?')}  CUDA {_clean(status['cuda_version'] or '?')}  "
        f"backend {_clean(status['backend'])}{state}"
    ]
    health = status.get("health") or {}
    if health.get("status") not in (None, "pass"):
        lines.append(paint(_RED, f"health {_clean(health['status'])}: " + "; ".join(map(_clean, health["problems"]))))
    if status.get("simulated"):
        lines.insert(0, paint(_YELLOW, f"SIMULATED host: {_clean(status['simulated'])}"))
    if status.get("paused"):
        lines.append(paint(_YELLOW, _clean(paused_text(status))))
    if not status["gpus"]:
        lines.append("no GPU found")
    for card in status["gpus"]:
        label = f"[{card['index']}]" if card["kind"] == "gpu" else f" └ {_clean(card['title'].split(' ', 2)[2])}"
        util, sm = card["utilization_ratio"], card.get("sm_active_ratio")
        sm_text = "" if sm is None else f", SM {_n(100 * sm, width=3)} %"
        fields = [
            f"{paint(_CYAN, label)} {paint(_BOLD, _clean(card['name']))}",
            f"{paint(_RED if card['problems'] else _YELLOW, _n(card['temperature_celsius'], width=3) + '°C')}, "
            f"{_n(None if util is None else 100 * util, width=3)} %{sm_text}",
            f"{_n(card['memory_used_bytes'], MIB, 6)} / {_n(card['memory_total_bytes'], MIB, 6)} MiB",
            f"{_n(card['power_watts'], width=4)} / {_n(card['power_limit_watts'], width=4)} W",
        ]
        if card["state"] != "up":
            fields.append(paint(_RED, card["state"].upper()))
        procs = " ".join(_process(proc) for proc in card["processes"])
        line = " | ".join(fields) + (f" | {procs}" if procs else "")
        lines.append(line)
        lines.extend(f"    = {_clean(usage_line(row))}" for row in card.get("usage", ()))
        lines.extend(paint(_RED, f"    ! {_clean(problem)}") for problem in card["problems"])
    return "\n".join(lines) + "\n"
