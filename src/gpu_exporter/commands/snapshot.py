"""The subcommands for a person at the box: ``gpu-exporter snapshot`` and ``gpu-exporter doctor``.

``snapshot`` runs the exporter's own backend, catalogue and sampler for one cycle (or one per
``--watch`` interval) and prints :mod:`.terminal`'s view or the status JSON; no server starts.
Every exporter flag (``--backend``, ``--path.procfs``, collectors …) applies as well. Exit codes:
0 ok, 1 no GPU or no driver (with the reason), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from gpu_exporter.assemble import sampler_for
from gpu_exporter.assemble.backends import select
from gpu_exporter.backends.base import BackendUnavailable
from gpu_exporter.commands import check, doctor
from gpu_exporter.commands.pause import pause_command, resume_command
from gpu_exporter.config import ConfigError, Settings
from gpu_exporter.control.client import Unreachable, ask
from gpu_exporter.logs import setup
from gpu_exporter.status.terminal import render
from gpu_exporter.status.view import status

USAGE_ERROR = 2
NO_GPU = 1
ParseSettings = Callable[[Sequence[str], dict[str, str]], Settings]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}; see --help\n")


#: ``--watch`` without a number: print at every collect interval (-c). Not a string: argparse would
#: pass a string constant through ``type=float``.
EVERY_INTERVAL = object()


def _snapshot_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpu-exporter snapshot",
        description="One look at every GPU from the exporter's own data, as text or JSON; no server starts. "
        "Every exporter flag (--backend, --path.procfs, --collector.*) applies too.",
        allow_abbrev=False,
    )
    parser.add_argument("--json", action="store_true", help="print the status JSON (as /api/v1/status) instead")
    parser.add_argument(
        "--watch", type=float, nargs="?", const=EVERY_INTERVAL, metavar="SECONDS",
        help="print again every SECONDS (without a number: every --collect-interval / -c) until Ctrl-C",
    )  # fmt: skip
    parser.add_argument("--no-color", action="store_true", help="no ANSI colours (also NO_COLOR, or not a terminal)")
    return parser


def snapshot(argv: Sequence[str], parse_settings: ParseSettings) -> int:
    """``gpu-exporter snapshot``: see the module docstring."""
    ours, rest = _snapshot_parser().parse_known_args(argv)
    if isinstance(ours.watch, float) and not 0.1 <= ours.watch <= 86400:
        print(f"gpu-exporter snapshot: error: --watch {ours.watch:g}: give seconds from 0.1 to 86400", file=sys.stderr)
        return USAGE_ERROR
    try:
        settings = parse_settings(rest, dict(os.environ))
    except ConfigError as err:
        print(f"gpu-exporter snapshot: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    setup("error" if settings.log_level == "info" else settings.log_level, settings.log_format)
    pause = daemon_pause(settings)
    if pause is not None:  # the running exporter stepped aside on request: so does this look
        scope, until, source = pause.get("scope"), pause.get("until"), pause.get("source")
        if scope == "full":
            print(f"gpu-exporter snapshot: the exporter is paused on request until {until} ({source}): the GPUs "
                  "are released, and this look leaves them alone too; gpu-exporter resume ends the pause")  # fmt: skip
            return 0
        print(f"gpu-exporter snapshot: profiling paused on request until {until} ({source}): no SM activity, "
              "occupancy, tensor or DRAM values", file=sys.stderr)  # fmt: skip
        settings = replace(settings, collectors=settings.collectors - {"profiling"})
    try:
        backend, reason = select(settings)
    except BackendUnavailable as err:
        print(f"gpu-exporter snapshot: no GPU data: {err}", file=sys.stderr)
        return NO_GPU
    # Sampled at -c (--collect-interval, 1 s by default), as the daemon would: rates and GPM ratios are
    # over that interval; --watch SECONDS prints (and samples) at its own period.
    interval = ours.watch if isinstance(ours.watch, float) else settings.collect_interval
    sampler, attributor = sampler_for(settings, backend, reason, settings.collectors, interval=interval)
    color = not ours.no_color and "NO_COLOR" not in os.environ and sys.stdout.isatty()
    hostname = os.environ.get("NODE_NAME") or socket.gethostname()
    attributor.start()
    sampler.start()
    try:
        deadline = time.monotonic() + interval + 10.0
        sampler.first_cycle_done.wait(interval + 10.0)
        seen = None
        profiling = "profiling" in settings.collectors and ours.watch is None
        first_taken = [sampler.snapshot.taken_at]
        while True:
            current = sampler.snapshot
            partial = any(device.up and not device.values for device in current.devices)
            # profiling ratios (GPM) and what allocations used (the ledger) need two reads: a one-shot
            # look waits for the second cycle (bounded)
            held = ours.watch is None and any(e.kind in ("pod", "job") for d in current.devices for e in d.samples)
            partial = partial or ((profiling or held) and current.taken_at == first_taken[0])
            if partial and ours.watch is None and time.monotonic() < deadline:
                pass  # a GPU has no values yet: wait for the next cycle (bounded)
            elif current.taken_at != seen:
                seen = current.taken_at
                view = status(current, hostname, max(0.0, time.monotonic() - current.taken_at))
                problem = _no_data(view)
                if ours.json:
                    print(json.dumps(view), flush=True)
                elif not problem or ours.watch is not None:
                    prefix = "\x1b[H\x1b[2J" if ours.watch and color else ""
                    print(prefix + render(view, color), end="", flush=True)
                if ours.watch is None:
                    if problem:
                        print(f"gpu-exporter snapshot: {problem}", file=sys.stderr)
                        return NO_GPU
                    return 0
            time.sleep(min(0.2, interval / 4))
    except KeyboardInterrupt:
        return 0
    finally:
        sampler.stop()
        attributor.stop()


def daemon_pause(settings: Settings) -> dict[str, object] | None:
    """The pause the exporter running on this host has in force, asked over its control socket; None when
    there is none, or no exporter answers there."""
    if not settings.control_socket or settings.simulate:
        return None
    try:
        reply = ask(settings.control_socket, {"command": "status"})
    except Unreachable:
        return None
    pause = reply.get("pause")
    return pause if isinstance(pause, dict) else None


def _no_data(view: dict[str, object]) -> str:
    """Why the view has no GPU data (empty when it has some)."""
    if not view["backend_up"]:
        why = view.get("backend_problem") or view["backend_reason"]
        return f"no GPU data: {view['backend']} backend down: {why}; gpu-exporter doctor checks this host"
    if not view["gpus"]:
        return "no GPU found"
    return ""


def doctor_command(argv: Sequence[str], parse_settings: ParseSettings) -> int:
    """``gpu-exporter doctor``: see :mod:`.doctor`."""
    parser = _Parser(
        prog="gpu-exporter doctor",
        description="Check, in order, what the exporter needs to see GPUs and say the fix for each finding. "
        "Exit 0 healthy, 3 warnings, 4 failures. Every exporter flag (--backend, --dcgm.address, --path.procfs, "
        "--kubernetes …) applies too.",
        allow_abbrev=False,
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--path.dev", dest="dev", default="/dev", metavar="DIR", help="where the device nodes are")
    ours, rest = parser.parse_known_args(argv)
    try:
        settings = parse_settings(rest, dict(os.environ))
    except ConfigError as err:
        print(f"gpu-exporter doctor: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    if settings.simulate:
        print(
            "gpu-exporter doctor: error: doctor checks this host's driver and GPUs, and --simulate reads neither; "
            "run it without --simulate (gpu-exporter snapshot --simulate shows the simulated host)",
            file=sys.stderr,
        )
        return USAGE_ERROR
    setup("error" if settings.log_level == "info" else settings.log_level, settings.log_format)
    return doctor.main(settings, ours.json, Path(ours.dev))


def subcommand(args: Sequence[str], parse_settings: ParseSettings) -> int | None:
    """Run ``args[0]`` when it names a subcommand and return its exit code; None otherwise."""
    if args[:1] == ["snapshot"]:
        return snapshot(args[1:], parse_settings)
    if args[:1] == ["doctor"]:
        return doctor_command(args[1:], parse_settings)
    if args[:1] == ["check"]:
        return check.main(args[1:])
    if args[:1] == ["pause"]:
        return pause_command(args[1:], parse_settings)
    if args[:1] == ["resume"]:
        return resume_command(args[1:], parse_settings)
    return None
