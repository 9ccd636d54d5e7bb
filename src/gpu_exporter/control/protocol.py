"""The control socket's messages: one line of JSON each way, then the connection closes.

A request is ``{"command": "pause", "scope": "full" | "profiling", "seconds": S}``, ``{"command":
"resume"}`` or ``{"command": "status"}``; the answer is ``{"ok": true, "pause": PAUSE | null}`` (the pause
in force after the request, ``PAUSE`` being ``{"scope", "until", "source"}`` with ``until`` in UTC, ISO
8601) or ``{"ok": false, "error": "…"}`` naming what was wrong.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gpu_exporter.sampling.pause import SCOPES, Pause, Pauses

#: The longest request or answer read (bytes): a line of a few dozen.
MAX_MESSAGE = 4096
COMMANDS = ("pause", "resume", "status")


def stamp(unix: float) -> str:
    """Unix time → ``2026-12-07T05:40:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


def pause_json(pause: Pause | None) -> dict[str, Any] | None:
    if pause is None:
        return None
    return {"scope": pause.scope, "until": stamp(pause.until_wall), "source": pause.source}


def answer(line: bytes, pauses: Pauses, source: str) -> dict[str, Any]:
    """The answer to one request line; a request that cannot be carried out changes nothing."""
    try:
        request = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"ok": False, "error": "the request is not one line of JSON"}
    if not isinstance(request, dict) or request.get("command") not in COMMANDS:
        return {"ok": False, "error": f"the request names no command: one of {', '.join(COMMANDS)}"}
    command = request["command"]
    if command == "pause":
        scope, seconds = request.get("scope"), request.get("seconds")
        if scope not in SCOPES:
            return {"ok": False, "error": f"a pause's scope is one of {', '.join(SCOPES)}"}
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            return {"ok": False, "error": "a pause's seconds is a number"}
        try:
            return {"ok": True, "pause": pause_json(pauses.request(scope, float(seconds), source))}
        except ValueError as err:
            return {"ok": False, "error": str(err)}
    if command == "resume":
        pauses.resume()
    return {"ok": True, "pause": pause_json(pauses.current())}


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"
