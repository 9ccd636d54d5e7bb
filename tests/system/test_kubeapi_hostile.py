"""A hostile Kubernetes API server, against the real exporter on loopback: a watch line that never
ends, a small gzip list page that expands to 256 MiB, a watch that ignores ``timeoutSeconds`` and a
flood of 20,000 watch events. Every byte is bounded before it is buffered, watches end on their own
deadline and a flood costs a few parses a second, not one per event."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.harness import SCENARIOS, Exporter, samples
from tests.kubeapi_server import NODE, KubeApi, api_pod
from tests.podresources_server import FakeKubelet
from tests.system.test_dra import _start, api, certs, kubelet

__all__ = ["api", "certs", "kubelet"]  # fixtures shared with tests/system/test_dra.py

MIB = 1024 * 1024


def _stream_head(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()


def _failures(exporter: Exporter, kind: str) -> float:
    parsed = samples(exporter.metrics())
    found = parsed.get("gpu_exporter_source_failures_total", {})
    return sum(v for labels, v in found.items() if dict(labels).get("kind") == kind)


def _until(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds}s: {what}"
        time.sleep(0.1)


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_watch_line_that_never_ends_is_cut_at_the_event_bound(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    ended: list[int] = []

    def endless(handler: BaseHTTPRequestHandler, query: dict[str, str]) -> bool:
        if query.get("watch") != "1":
            return False
        _stream_head(handler)
        sent = 0
        try:
            _chunk(handler, b'{"type":"ADDED","object":{"metadata":{"name":"')
            while sent < 64 * MIB:
                _chunk(handler, b"x" * 65536)
                sent += 65536
            _chunk(handler, b'"}}}\n')
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        ended.append(sent)
        return True

    api.hostile = endless
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)
    try:
        _until(lambda: bool(ended), "a watch stream ended")
        # the 4 MiB event bound, plus what the sockets buffer: never the whole 64 MiB line
        assert ended[0] < 24 * MIB, ended
        _until(lambda: _failures(exporter, "too_large") >= 1, "the watch counted as too_large")
    finally:
        exporter.stop()


_BOMB: list[bytes] = []


def _bomb() -> bytes:
    """A PodList whose gzip body is ~256 KiB and expands to 256 MiB (spaces inside the JSON)."""
    if not _BOMB:
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        parts = [packer.compress(b'{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"5"},"items":[')]
        block = b" " * MIB
        parts += [packer.compress(block) for _ in range(256)]
        parts += [packer.compress(b"]}"), packer.flush()]
        _BOMB.append(b"".join(parts))
    return _BOMB[0]


def test_a_gzip_list_that_expands_to_256_mib_is_refused_within_the_page_bound(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    body = _bomb()
    assert len(body) < 2 * MIB

    def bomb(handler: BaseHTTPRequestHandler, query: dict[str, str]) -> bool:
        if query.get("watch") == "1" or not handler.path.startswith("/api/v1/pods"):
            return False
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True

    api.hostile = bomb
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)
    try:
        _until(lambda: _failures(exporter, "too_large") >= 1, "the list counted as too_large")
        parsed = samples(exporter.metrics())
        up = parsed["gpu_exporter_source_up"]
        assert [v for labels, v in up.items() if dict(labels)["source"] == "kubernetes_pods"] == [0.0]
        assert _peak_rss(exporter.process.pid) < 200 * MIB
    finally:
        exporter.stop()


def test_a_watch_that_ignores_its_timeout_is_left_and_listed_again(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    stop = threading.Event()

    def forever(handler: BaseHTTPRequestHandler, query: dict[str, str]) -> bool:
        if query.get("watch") != "1":
            return False
        _stream_head(handler)
        bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "100"}}}
        try:
            while not stop.wait(0.2):  # a bookmark every 0.2 s, whatever timeoutSeconds said
                _chunk(handler, json.dumps(bookmark).encode() + b"\n")
        except OSError:
            pass
        return True

    api.hostile = forever
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)  # watches for 3 s
    try:

        def pod_lists() -> int:
            return sum(1 for path, _ in list(api.requests) if path.startswith("/api/v1/pods") and "watch=" not in path)

        _until(lambda: pod_lists() >= 1, "the first list")
        # timeoutSeconds=3 plus the 5 s request timeout: a second list by then, not never
        _until(lambda: pod_lists() >= 2, "a list after the watch's deadline", seconds=25)
    finally:
        stop.set()
        exporter.stop()


def test_a_flood_of_20000_watch_events_is_taken_in_seconds(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    done: list[float] = []
    padding = "p" * 2000

    def flood(handler: BaseHTTPRequestHandler, query: dict[str, str]) -> bool:
        if query.get("watch") != "1" or not handler.path.startswith("/api/v1/pods") or done:
            return False
        _stream_head(handler)
        started = time.monotonic()
        try:
            for n in range(20000):
                pod = api_pod("flood", f"p{n}", f"uid-{n}", {}, node=NODE, labels={"pad": padding})
                pod["metadata"]["resourceVersion"] = str(200 + n)
                _chunk(handler, json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n")
        except OSError:
            return True
        done.append(time.monotonic() - started)
        handler.wfile.write(b"0\r\n\r\n")
        return True

    api.hostile = flood
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)
    try:
        # 40 MB of events: the exporter must read them as fast as they come (one parse per event of
        # every pod watched so far held a core for minutes)
        _until(lambda: bool(done), "the flood was read", seconds=60)
        assert done[0] < 40, done
    finally:
        exporter.stop()
