"""TLS clients that ask for /metrics and never read (issue 40): each holds what the docs say (about
155 KiB: OpenSSL's buffers, a 32 KiB read buffer and a 16 KiB write slice, not a 64 KiB slice
encrypted at once); once they are gone most of it is given back to the system and what stays is reused by
the next clients, not piled up (RSS is the point here, so it is asserted as a bound)."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

from bench.scenarios import Size, write
from tests.webtls import launch, make_certs, open_fds

CLIENTS = 200
KIB = 1024


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_tls_clients_that_never_read_hold_the_documented_bound(fakenvml_dir: Path, tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    web = tmp_path / "web.yml"
    crt, key = certs.path("server.crt"), certs.path("server.key")
    web.write_text(f"tls_server_config: {{cert_file: {crt}, key_file: {key}}}\n")
    scenario = write(tmp_path, Size(64))
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "1h", "--metrics.detail=full",
                      "--web.config.file", str(web), scenario=scenario)  # fmt: skip
    context = certs.client_context(with_client_cert=False)
    opened: list[ssl.SSLSocket] = []
    try:
        pid = exporter.process.pid
        # One whole scrape first: the exposition is rendered once per snapshot and shared by every client, so
        # its bytes are not a client's (counted per client, 64 GPUs in full detail added ~20 KiB to each).
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
        with (
            socket.create_connection(("127.0.0.1", exporter.port), timeout=30) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as whole,
        ):
            whole.sendall(request)
            while whole.recv(65536):
                pass
        fds = open_fds(pid)
        before = _rss(pid)
        held: list[float] = []
        left_after: list[float] = []
        for _ in range(2):
            for index in range(CLIENTS):  # from 4 addresses: one holds at most a quarter of the connection cap
                raw = socket.socket()
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                raw.bind((f"127.0.0.{20 + index % 4}", 0))
                raw.settimeout(10)
                raw.connect(("127.0.0.1", exporter.port))
                sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
                assert sock.recv(1) == b"H"  # answered (the first bytes are out), then never read again
                opened.append(sock)
            held.append((_rss(pid) - before) / CLIENTS)
            for sock in opened:
                sock.close()
            opened.clear()
            deadline = time.monotonic() + 30
            while open_fds(pid) > fds + 2:
                assert time.monotonic() < deadline, "the exporter did not close the connections"
                time.sleep(0.1)
            # Given back at the server's next housekeeping (every second here): most of what a client held is
            # returned; what stays (allocator fragments, ~85-110 KiB measured) is reused by the next round of
            # clients, never piled up: the second round leaves no more than the first did.
            target = held[-1] * 0.8 if not left_after else left_after[0] + 16 * KIB
            deadline = time.monotonic() + 15
            while (left := (_rss(pid) - before) / CLIENTS) > target:
                assert time.monotonic() < deadline, f"{left / KIB:.0f} KiB per client still held after they left"
                time.sleep(0.2)
            left_after.append(left)
        # measured: ~155 KiB (OpenSSL's buffers, the 32 KiB read buffer, a 16 KiB write slice); 195 with
        # 64 KiB slices encrypted at once; the second round reuses what the first gave back
        assert held[0] < 176 * KIB and held[1] < 176 * KIB, [f"{h / KIB:.0f} KiB" for h in held]
    finally:
        for sock in opened:
            sock.close()
        exporter.stop()
