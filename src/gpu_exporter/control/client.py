"""The subcommands' side of the control socket: one request to the running exporter, its answer."""

from __future__ import annotations

import json
import socket
from typing import Any

from gpu_exporter.control.protocol import MAX_MESSAGE, encode

TIMEOUT = 5.0


class Unreachable(Exception):
    """No exporter answered at the socket; the message says why and what to check."""


def ask(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """Send ``request`` to the exporter at ``path`` and return its answer; raises Unreachable."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT)
            sock.connect(path)
            sock.sendall(encode(request))
            data = b""
            while b"\n" not in data and len(data) <= MAX_MESSAGE:
                chunk = sock.recv(MAX_MESSAGE)
                if not chunk:
                    break
                data += chunk
    except FileNotFoundError:
        running = f"is gpu-exporter running, with --control.socket={path}?"
        raise Unreachable(f"no control socket at {path}: {running}") from None
    except PermissionError:
        raise Unreachable(f"no permission to use {path}: run as the exporter's user (or root)") from None
    except OSError as err:
        raise Unreachable(f"the exporter at {path} did not answer: {err.strerror or err}") from None
    try:
        reply = json.loads(data.partition(b"\n")[0].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise Unreachable(f"{path} answered something that is not the exporter's control protocol") from None
    if not isinstance(reply, dict):
        raise Unreachable(f"{path} answered something that is not the exporter's control protocol")
    return reply
