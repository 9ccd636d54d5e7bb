"""Aborted TLS handshakes against the real exporter on loopback: clients that send one byte of a
ClientHello and close must not grow the exporter's memory round after round, and one round's
connections must not cost asyncio's default 256 KiB read buffer each (RSS is the point here, so it
is asserted as a bound)."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

from tests.webtls import Certs, launch, make_certs, open_fds

CLIENTS = 200
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _round(port: int, pid: int, baseline_fds: int) -> int:
    """CLIENTS connections that each send 0x16 and close once all are open; the exporter's RSS once
    it has closed them all (its open descriptors are back to where they were)."""
    opened = []
    try:
        for index in range(CLIENTS):  # from 4 addresses: one holds at most a quarter of the connection cap
            sock = socket.create_connection(
                ("127.0.0.1", port), timeout=10, source_address=(f"127.0.0.{10 + index % 4}", 0)
            )
            sock.sendall(b"\x16")
            opened.append(sock)
        deadline = time.monotonic() + 20
        while open_fds(pid) < baseline_fds + CLIENTS and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the exporter's descriptors: every connection accepted
    finally:
        for sock in opened:
            sock.close()
    deadline = time.monotonic() + 20
    while open_fds(pid) > baseline_fds + 2:
        assert time.monotonic() < deadline, "the exporter did not close the aborted connections"
        time.sleep(0.05)
    return _rss(pid)


def test_aborted_tls_handshakes_do_not_grow_memory(fakenvml_dir: Path, tmp_path: Path, certs: Certs) -> None:
    for name in ("server.crt", "server.key"):
        shutil.copy(certs.path(name), tmp_path / name)
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(web), "--collect-interval", "1h")
    try:
        pid = exporter.process.pid
        fds = open_fds(pid)
        before = _rss(pid)
        first = _round(exporter.port, pid, fds)
        rounds = [_round(exporter.port, pid, fds) for _ in range(3)]
        # one round: 200 connections at once, each with a TLS read buffer (asyncio's default: 50 MiB)
        assert first - before < 24 * MIB, (before, first)
        # rounds after: freed and reused (before the fix each kept its buffers: +60 MiB in three rounds)
        assert rounds[-1] - first < 12 * MIB, (first, rounds)
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0
