"""HTTP edge cases and usage errors against the real exporter: an HTTP version other than 1.0 or
1.1 is refused with 505, a request with both Content-Length and Transfer-Encoding is refused and
its connection closed (RFC 9112 section 6.3), a bad --kubernetes.kubelet-url exits 2 with one line."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import SCENARIOS, Exporter, start


@pytest.fixture(scope="module")
def exporter(fakenvml_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    running = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path_factory.mktemp("edges"), "--collect-interval", "1h"
    )
    yield running
    running.stop()


def _exchange(port: int, request: bytes) -> tuple[bytes, bool]:
    """The exporter's answer, and whether it closed the connection after it (within 10 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
            return answer, True
        except TimeoutError:
            return answer, False


def test_http_9_9_is_refused_with_505(exporter: Exporter) -> None:
    answer, closed = _exchange(exporter.port, b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 505 "), answer[:200]
    assert closed


def test_content_length_and_transfer_encoding_close_the_connection(exporter: Exporter) -> None:
    request = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"0\r\n\r\n")  # fmt: skip
    answer, closed = _exchange(exporter.port, request)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert closed, "the connection was kept open"
    assert exporter.get("/healthz").status_code == 200


@pytest.mark.parametrize("url", ["http://127.0.0.1:10250/pods", "https://node:99999/pods", "https://:10250/pods",
                                 "https://node:port/pods", "https://a b/pods"])  # fmt: skip
def test_bad_kubelet_url_exits_2_with_one_line(url: str) -> None:
    command = [sys.executable, "-m", "gpu_exporter", "--kubernetes", "--kubernetes.kubelet-url", url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "--kubernetes.kubelet-url=" in result.stderr, result.stderr
