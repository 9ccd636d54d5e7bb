"""Clients that ask for /metrics and never read, against the real exporter on loopback with 64
GPUs: each holds at most a write slice, not its own copy of the response (RSS is the point here,
so it is asserted as a bound)."""

from __future__ import annotations

import socket
from pathlib import Path

from bench.scenarios import Size, write
from tests.harness import start

CLIENTS = 200
MIB = 1024 * 1024


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_clients_that_never_read_share_the_response(fakenvml_dir: Path, tmp_path: Path) -> None:
    # full detail: a response of more than 512 KiB (the lean default's is about 380 KiB at 64 GPUs)
    scenario = write(tmp_path, Size(64))
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--metrics.detail=full")
    opened: list[socket.socket] = []
    try:
        size = len(exporter.get("/metrics", headers={"Accept-Encoding": "identity"}).content)
        assert size > 512 * 1024, size  # a response much larger than the write slice and socket buffers
        before = _rss(exporter.process.pid)
        for index in range(CLIENTS):  # from 4 addresses: one holds at most a quarter of the connection cap
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.bind((f"127.0.0.{10 + index % 4}", 0))
            sock.settimeout(10)
            sock.connect(("127.0.0.1", exporter.port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
            opened.append(sock)
        for sock in opened:
            assert sock.recv(1) == b"H"  # answered (the first bytes are out), then never read again
        grown = _rss(exporter.process.pid) - before
        # a copy each would be 200 x the response; a slice each is a few MiB
        assert grown < 48 * MIB, (grown, size)
        assert exporter.get("/healthz").status_code == 200
    finally:
        for sock in opened:
            sock.close()
        exporter.stop()
