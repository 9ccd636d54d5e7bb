"""``gpu-exporter check``: the health model as a Node Problem Detector custom plugin, or a cron or
systemd check. It asks a running exporter's ``/api/v1/status`` and answers in NPD's plugin protocol:
exit 0 when every expected GPU is healthy, 1 when one needs action, 2 when it cannot tell (the
exporter unreachable or answering nonsense, its backend down, nothing judged yet), with one line of at
most :data:`MAX_LINE` characters on stdout that names the GPU, the problem and the action.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

OK, PROBLEM, UNKNOWN = 0, 1, 2
#: NPD's default ``max_output_length``: it cuts a plugin's message there.
MAX_LINE = 80
DEFAULT_URL = "http://127.0.0.1:9400"
#: The most of the status document read (a status of 64 GPUs with processes is far smaller).
MAX_BODY = 8 * 1024 * 1024


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line naming the problem and the fix, exit code 2 (NPD reads 2 as unknown, as it is)."""
        print(f"gpu-exporter check: {message}; see gpu-exporter check --help", file=sys.stderr)
        sys.exit(UNKNOWN)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpu-exporter check", description=__doc__)
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the exporter's base URL (default {DEFAULT_URL})")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for its answer (default 5)")
    return parser


def _fit(text: str) -> str:
    """One line of at most :data:`MAX_LINE` characters (an ellipsis where it was cut)."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def verdict(status: Mapping[str, Any]) -> tuple[int, str]:
    """The exit code and line for one status document (``/api/v1/status``)."""
    if not status.get("backend_up", False):
        return UNKNOWN, _fit(f"UNKNOWN: backend {status.get('backend', '?')} down: {status.get('backend_reason', '')}")
    health = status.get("health")
    if not isinstance(health, Mapping) or health.get("status") not in ("pass", "warn", "fail"):
        return UNKNOWN, "UNKNOWN: the exporter has not judged its GPUs yet"
    problems = [str(line) for line in health.get("problems", [])]
    present = health.get("present_gpus")
    gpus = "1 GPU" if present == 1 else f"{present} GPUs"
    if health["status"] == "fail" or health.get("action", "none") != "none":
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        first = problems[0] if problems else f"health {health['status']}: {health.get('action')}"
        room = MAX_LINE - len(more)
        return PROBLEM, (_fit(first) if len(first) <= room else first[: room - 1] + "…") + more
    if problems:  # warnings with nothing to do
        return OK, _fit(f"OK: {gpus}, warning: {problems[0]}")
    return OK, _fit(f"OK: {gpus} healthy")


def fetch(url: str, timeout: float) -> dict[str, Any]:
    """The exporter's status document; raises OSError or ValueError saying why not."""
    with urllib.request.urlopen(url.rstrip("/") + "/api/v1/status", timeout=timeout) as response:
        body = response.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise ValueError("status document too large")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("status document is not an object")
    return document


def main(argv: Sequence[str]) -> int:
    """Print one line and return the exit code."""
    args = _parser().parse_args(list(argv))
    if not args.url.startswith(("http://", "https://")):
        _parser().error(f"--url {args.url!r} is not an http:// or https:// URL, e.g. {DEFAULT_URL}")
    if not 0 < args.timeout <= 300:
        _parser().error(f"--timeout {args.timeout:g} is not from 0 to 300 seconds")
    try:
        code, line = verdict(fetch(args.url, args.timeout))
    except urllib.error.HTTPError as err:
        code, line = UNKNOWN, _fit(f"UNKNOWN: exporter at {args.url} answered HTTP {err.code}")
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        code, line = UNKNOWN, _fit(f"UNKNOWN: exporter at {args.url} unreachable: {reason}")
    print(line)
    return code
