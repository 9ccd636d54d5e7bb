"""Basic auth under attack, against the real exporter on loopback: wrong passwords from many
keep-alive connections cannot starve probes, remembered scrapes or a first login; bcrypt inputs
are validated (cost range, password length) and timing does not tell which users exist."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest

from gpu_exporter.http.webconfig import WebConfigError, load
from tests.flood import fresh_scrape
from tests.harness import Exporter
from tests.webtls import bcrypt_hash, launch

ATTACKERS = 64


def _hash(password: str, cost: int) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def _basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


class _Attack:
    """``ATTACKERS`` keep-alive connections sending a new wrong password as soon as each answer
    arrives (reconnecting when closed), on an event loop in a thread, until stopped."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _one(self, index: int) -> None:
        attempt = 0
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            try:
                while not self.stop.is_set():
                    attempt += 1
                    auth = _basic("alice", f"wrong-{index}-{attempt}")
                    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\n\r\n")
                    self.sent += 1
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                      if line.lower().startswith(b"content-length")))  # fmt: skip
                    await reader.readexactly(length)
                    if b"connection: close" in head.lower():
                        break
            except (OSError, asyncio.IncompleteReadError, TimeoutError, StopIteration, ValueError):
                pass
            finally:
                writer.close()

    async def _main(self) -> None:
        await asyncio.gather(*(self._one(index) for index in range(ATTACKERS)))

    def __enter__(self) -> _Attack:
        self.thread.start()
        deadline = time.monotonic() + 20
        while self.sent < ATTACKERS * 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture
def exporter(fakenvml_dir: Path, tmp_path: Path) -> Iterator[Exporter]:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{_hash('s3cret', 10)}'\n  bob: '{_hash('hunter2', 10)}'\n")
    settings = tmp_path / "config.yml"
    settings.write_text("web:\n  probes-without-auth: true\n")
    running = launch(fakenvml_dir, tmp_path, "--config.file", str(settings), "--web.config.file", str(web),
                     "--web.max-connections", "32", "--collect-interval", "1h")  # fmt: skip
    yield running
    running.stop()


def test_wrong_passwords_cannot_starve_probes_scrapes_or_a_first_login(exporter: Exporter) -> None:
    assert exporter.get("/metrics", auth=("alice", "s3cret")).status_code == 200  # remembered from now on
    with _Attack(exporter.port) as attack:
        assert attack.sent >= ATTACKERS * 2, "the attack did not start"
        for _ in range(3):  # from another address than the attack's, which holds its share of the connections
            assert fresh_scrape(exporter.url + "/healthz", "127.0.0.3").status_code == 200
            assert fresh_scrape(exporter.url + "/metrics", "127.0.0.3", auth=("alice", "s3cret")).status_code == 200
        # a first login from another address: within Prometheus' default 10 s scrape timeout
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=transport, timeout=10) as client:
            started = time.monotonic()
            first = client.get(f"http://127.0.0.1:{exporter.port}/metrics", auth=("bob", "hunter2"))
            assert first.status_code == 200 and time.monotonic() - started < 10
    assert exporter.process.poll() is None


def test_password_over_72_bytes_is_a_401_on_a_kept_connection(exporter: Exporter) -> None:
    with httpx.Client(timeout=10) as client:
        for password in ("x" * 73, "s3cret" + "x" * 100, "a\0b"):
            answer = client.get(f"{exporter.url}/metrics", auth=("alice", password))
            assert answer.status_code == 401, password
        assert client.get(f"{exporter.url}/metrics", auth=("alice", "s3cret")).status_code == 200
    assert "Traceback" not in exporter.log()


def test_timing_does_not_tell_which_users_exist(fakenvml_dir: Path, tmp_path: Path) -> None:
    """alice's hash is cheap (cost 4), bob's costly (cost 12): unknown names must not all be answered
    at alice's cost, or a slow answer would single bob out as real."""
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{bcrypt_hash('a')}'\n  bob: '{_hash('b', 12)}'\n")
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(web), "--collect-interval", "1h")
    try:

        def seconds(user: str) -> float:
            started = time.monotonic()
            assert exporter.get("/metrics", auth=(user, "wrong")).status_code == 401
            return time.monotonic() - started

        bob = min(seconds("bob") for _ in range(2))
        unknown = [seconds(f"nobody-{index}") for index in range(20)]
        assert max(unknown) > bob / 2, (bob, unknown)
    finally:
        exporter.stop()


@pytest.mark.parametrize("cost", [3, 15, 31, 99])
def test_bcrypt_cost_outside_4_to_14_is_refused(tmp_path: Path, cost: int) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '$2y${cost:02d}${'a' * 53}'\n")
    with pytest.raises(WebConfigError) as caught:
        load(str(web))
    assert f"bcrypt cost {cost}, outside 4-14" in str(caught.value)
    if cost == 31:
        command = [sys.executable, "-m", "gpu_exporter", "--web.config.file", str(web)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
