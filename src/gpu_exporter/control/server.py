"""The exporter's side of the control socket (``--control.socket``): a Unix stream socket only its owner
may use (mode 0600, made so before anyone can connect), served by one thread; each connection sends one
request line and gets one answer (:mod:`.protocol`). A socket that cannot be made (its folder missing and
not creatable, no permission, another exporter listening there) is logged once and the exporter runs on
without it: pausing is an option, monitoring is not. The socket file is removed when the exporter stops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
from pathlib import Path

from gpu_exporter.control.protocol import MAX_MESSAGE, answer, encode
from gpu_exporter.sampling.pause import Pauses

log = logging.getLogger(__name__)

#: How long one client may take to send its request (seconds).
CLIENT_TIMEOUT = 2.0


class ControlServer:
    """Serves the control socket at ``path`` for ``pauses``."""

    def __init__(self, path: str, pauses: Pauses, source: str = "gpu-exporter pause", asked: bool = True) -> None:
        """``asked``: the path was given (a socket that cannot be made is a warning; the default's, info)."""
        self._asked = asked
        self._path = path
        self._pauses = pauses
        self._source = source
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Bind and serve; False (logged) when the socket cannot be made."""
        try:
            self._sock = self._bind(Path(self._path))
        except OSError as err:
            log.log(
                logging.WARNING if self._asked else logging.INFO,
                "control socket %s not available (%s): gpu-exporter pause and resume cannot reach this exporter; "
                "give --control.socket a path in a folder it may write, or an empty value to turn it off",
                self._path, err.strerror or err,
            )  # fmt: skip
            return False
        self._thread = threading.Thread(target=self._serve, name="control-socket", daemon=True)
        self._thread.start()
        log.info("control socket listening at %s (gpu-exporter pause / resume)", self._path)
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            if self._thread is not None:
                self._thread.join(2.0)
            with contextlib.suppress(OSError):
                os.unlink(self._path)
            self._sock = None

    @staticmethod
    def _bind(path: Path) -> socket.socket:
        if not path.parent.is_dir():
            path.parent.mkdir(mode=0o700, parents=True)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise OSError(f"{path} exists and is not a socket")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                try:
                    probe.connect(str(path))
                except OSError:
                    path.unlink()  # left by an exporter that did not stop cleanly
                else:
                    raise OSError(f"another process serves {path}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # owner-only from the moment the file exists
        try:
            sock.bind(str(path))
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(8)
        sock.settimeout(0.5)
        return sock

    def _serve(self) -> None:
        while not self._stop.is_set() and self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            with conn:
                try:
                    self._handle(conn)
                except OSError as err:
                    log.debug("control socket client: %s", err)

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(CLIENT_TIMEOUT)
        data = b""
        while b"\n" not in data and len(data) <= MAX_MESSAGE:
            chunk = conn.recv(MAX_MESSAGE)
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_MESSAGE:
            reply = {"ok": False, "error": f"a request is one line of at most {MAX_MESSAGE} bytes"}
        else:
            reply = answer(data.partition(b"\n")[0], self._pauses, self._source)
        if reply.get("ok"):
            log.info("control socket: %s", _said(reply))
        conn.sendall(encode(reply))


def _said(reply: dict[str, object]) -> str:
    pause = reply.get("pause")
    if isinstance(pause, dict):
        return f"{pause['scope']} pause until {pause['until']} ({pause['source']})"
    return "no pause in force"
