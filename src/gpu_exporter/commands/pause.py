"""``gpu-exporter pause [--profiling-only] [--for DURATION]`` and ``gpu-exporter resume``: ask the running
exporter, over its control socket (``--control.socket``, the same flag, environment variable and config
key as the exporter's), to step aside and to come back.

A full pause releases every GPU handle (NVML shut down; DCGM's groups and watches removed and the
connection closed) so a GPU reset, a MIG change or a VFIO bind can proceed; ``--profiling-only`` stops
only the profiling collector's sampling so another profiler (Nsight Compute, DCGM's profiling) can take
the counters. A pause ends on its own after ``--for`` (default 10m, at most 1h); ``resume`` ends it early.
Exit 0 done, 1 no exporter answered (or it refused), 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from gpu_exporter.config import ConfigError, Settings
from gpu_exporter.control.client import Unreachable, ask
from gpu_exporter.options import parse_duration
from gpu_exporter.sampling.pause import DEFAULT_SECONDS, MAX_SECONDS

USAGE_ERROR = 2
ParseSettings = Callable[[Sequence[str], dict[str, str]], Settings]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}; see --help\n")


def _duration(value: str) -> float:
    try:
        return parse_duration(value, 1.0, MAX_SECONDS)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--for={value!r}: use {err}") from None


def pause_command(argv: Sequence[str], parse_settings: ParseSettings) -> int:
    parser = _Parser(
        prog="gpu-exporter pause",
        description="Ask the running exporter to release the GPUs (or, with --profiling-only, their profiling "
        "counters) for a while; it comes back on its own. 'gpu-exporter resume' ends the pause early.",
        allow_abbrev=False,
    )
    parser.add_argument("--profiling-only", action="store_true",
                        help="stop only profiling sampling (GPM, DCGM's profiling watches): another profiler "
                        "can take the counters while every other metric goes on")  # fmt: skip
    parser.add_argument("--for", dest="seconds", type=_duration, default=DEFAULT_SECONDS, metavar="DURATION",
                        help=f"how long, e.g. 90s or 5m (default {DEFAULT_SECONDS / 60:g}m, at most "
                        f"{MAX_SECONDS / 60:g}m)")  # fmt: skip
    ours, rest = parser.parse_known_args(argv)
    scope = "profiling" if ours.profiling_only else "full"
    return _send("pause", {"command": "pause", "scope": scope, "seconds": ours.seconds}, rest, parse_settings)


def resume_command(argv: Sequence[str], parse_settings: ParseSettings) -> int:
    parser = _Parser(
        prog="gpu-exporter resume",
        description="End the running exporter's pause now: it opens the GPU library again and every metric comes "
        "back, counters kept.",
        allow_abbrev=False,
    )
    _ours, rest = parser.parse_known_args(argv)
    return _send("resume", {"command": "resume"}, rest, parse_settings)


def _send(name: str, request: dict[str, object], rest: Sequence[str], parse_settings: ParseSettings) -> int:
    try:
        settings = parse_settings(rest, dict(os.environ))
    except ConfigError as err:
        print(f"gpu-exporter {name}: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    if not settings.control_socket:
        print(f"gpu-exporter {name}: error: --control.socket is empty (off): give the exporter's control socket",
              file=sys.stderr)  # fmt: skip
        return USAGE_ERROR
    try:
        reply = ask(settings.control_socket, request)
    except Unreachable as err:
        print(f"gpu-exporter {name}: error: {err}", file=sys.stderr)
        return 1
    if not reply.get("ok"):
        print(f"gpu-exporter {name}: error: the exporter refused: {reply.get('error')}", file=sys.stderr)
        return 1
    pause = reply.get("pause")
    if isinstance(pause, dict):
        what = "GPU handles released" if pause.get("scope") == "full" else "profiling counters released"
        print(f"paused ({pause.get('scope')}) until {pause.get('until')}: {what}; 'gpu-exporter resume' ends it early")
    else:
        print("not paused: the exporter reads every GPU")
    return 0
