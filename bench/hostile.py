"""Hostile load: a 64-GPU host (fake NVML) with process churn, TLS and basic auth (bcrypt cost 10),
under slow readers, aborted TLS handshakes and wrong passwords at once, while a Prometheus-like
scraper asks for /metrics with valid credentials once a second. Records each valid scrape's time
and status and the exporter's resident memory (peak: VmHWM) every second.

From the repository root, with the project venv::

    .venv/bin/python -m bench.hostile                  # 120 s, writes bench/results/hostile.json
    .venv/bin/python -m bench.hostile --seconds 30     # a short run
    .venv/bin/python -m bench.hostile --seconds 600    # the soak under mixed attack (issue 40)
    .venv/bin/python -m bench.hostile --keep-alive-flood 0   # without the keep-alive flood

The result gives resident memory's peak in each half of the run (flat: the second's not above the
first's) and the kernel's listen-queue overflows during it (a peer's SYN dropped because the accept
queue, net.core.somaxconn, was full: the attack keeps about 4,900 connection attempts outstanding
with the keep-alive flood, 3,900 without, against a queue of 4,096 and 512 held connections).

The attack, all from one process of its own: from 127.0.0.1, 200 TLS clients that ask for /metrics (valid
credentials, identity encoding, 4 KiB receive buffer), read one byte and never again (reopened as
the exporter closes them) and rounds of 100 connections that send one byte of a ClientHello and
close; from 127.0.0.3, 3,000 connections that send one byte of a ClientHello and nothing more,
each reopened as soon as the exporter closes it (issue 40); from 100 addresses (127.0.2.x), 600
keep-alive TLS connections sending a new wrong password as soon as each answer comes; from
127.0.0.4, 1,000 keep-alive TLS connections asking for /healthz again as soon as each answer comes
(reconnecting as the exporter closes them). The churn:
each GPU has 8 processes whose pids change every second. The honest scraper asks from 127.0.0.2,
a new connection each time, and every 5 s a user never seen before logs in for the first time from
an address of its own (127.0.3.x).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bcrypt
import httpx

from bench import procfs
from bench.scenarios import Size, write
from bench.soak import LEVEL_BYTES, level_off
from bench.systems import REPO, Running, _child_env, _popen
from tests.fakenvml.build import build
from tests.flood import HEALTHZ, Flood, fresh_scrape
from tests.harness import bound_port

SLOW_READERS = 200
ABORT_ROUND = 100
WRONG_PASSWORDS = 600
WRONG_ADDRESSES = 100
HANDSHAKE_FLOOD = 3000
KEEP_ALIVE_FLOOD = 1000
KEEP_ALIVE_SOURCE = "127.0.0.4"
FIRST_LOGINS = 40  # users "first-N", each logging in once, one every FIRST_LOGIN_EVERY seconds
FIRST_LOGIN_EVERY = 5.0
HONEST = "127.0.0.2"
RESULT = REPO / "bench" / "results" / "hostile.json"


def _churn(gpus: int) -> str:
    lines = []
    for gpu in range(gpus):
        for slot in range(8):
            base = 200_000 + (gpu * 8 + slot) * 100
            pids = ",".join(str(base + n) for n in range(100))
            lines += [
                f"gpu{gpu}.process.{slot + 1}.pid = {pids}@1",
                f"gpu{gpu}.process.{slot + 1}.used_memory = 1048576",
            ]
    return "\n".join(lines) + "\n"


def _certs(work: Path) -> None:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            "server.key", "-out", "server.crt", "-subj", "/CN=127.0.0.1", "-days", "2",
            "-addext", "subjectAltName=IP:127.0.0.1")  # fmt: skip


def _start(work: Path, fake: Path, scenario: Path) -> Running:
    _certs(work)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(10)).decode()
    first = bcrypt.hashpw(b"first-login", bcrypt.gensalt(10)).decode()  # one hash: bcrypt checks each anyway
    users = "".join(f"  first-{n}: '{first}'\n" for n in range(FIRST_LOGINS))
    web = work / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: server.crt, key_file: server.key}}\n"
                   f"basic_auth_users:\n  prometheus: '{hashed}'\n{users}")  # fmt: skip
    command = [sys.executable, "-m", "gpu_exporter", "--web.listen-address", "127.0.0.1:0",
               "--collect-interval", "1s", "--backend", "nvml", "--web.config.file", str(web),
               "--path.procfs", str(work / "no-proc")]  # fmt: skip
    running = _popen("gpu-exporter", command, _child_env(fake, scenario, None), 0, work)
    # port 0: the kernel picks the port as the exporter binds, and its first log line names it (no race)
    running.port = bound_port(running.log_path, lambda: running.process.poll() is None)
    return running


AUTH = b"Authorization: Basic " + base64.b64encode(b"prometheus:s3cret")


def _slow_readers(port: int, context: ssl.SSLContext, stop: threading.Event) -> None:
    held: list[ssl.SSLSocket] = []
    while not stop.is_set():
        held = [s for s in held if s.fileno() != -1]
        while len(held) < SLOW_READERS and not stop.is_set():
            try:
                raw = socket.socket()
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                raw.settimeout(10)
                raw.connect(("127.0.0.1", port))
                sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n" + AUTH + b"\r\n\r\n")
                sock.recv(1)
                held.append(sock)
            except OSError:
                continue
        stop.wait(5)
        for sock in held[: SLOW_READERS // 10]:  # some go away and come back
            sock.close()
    for sock in held:
        sock.close()


def _aborts(port: int, stop: threading.Event, count: list[int]) -> None:
    while not stop.is_set():
        opened = []
        for _ in range(ABORT_ROUND):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"\x16")
                opened.append(sock)
            except OSError:
                pass
        for sock in opened:
            sock.close()
        count[0] += len(opened)
        stop.wait(0.2)


async def _looping_client(
    port: int,
    context: ssl.SSLContext,
    stop: threading.Event,
    count: list[int],
    source: str,
    request: Callable[[int], bytes],
) -> None:
    """One keep-alive TLS client from ``source``: sends ``request(n)`` again as each answer arrives,
    reconnecting whenever the exporter closes it; ``count[0]``: answers read."""
    attempt = 0
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            while not stop.is_set():
                attempt += 1
                writer.write(request(attempt))
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                await reader.readexactly(length)
                count[0] += 1
                if b"connection: close" in head.lower():
                    break
        except (OSError, asyncio.IncompleteReadError, TimeoutError, StopIteration, ValueError, ssl.SSLError):
            pass
        finally:
            writer.close()


def _wrong_passwords(port: int, context: ssl.SSLContext, stop: threading.Event, count: list[int]) -> None:
    def wrong(index: int) -> Callable[[int], bytes]:
        def request(attempt: int) -> bytes:
            auth = base64.b64encode(f"prometheus:wrong-{index}-{attempt}".encode())
            return b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + auth + b"\r\n\r\n"

        return request

    async def main() -> None:
        await asyncio.gather(*(_looping_client(port, context, stop, count, f"127.0.2.{1 + i % WRONG_ADDRESSES}",
                                               wrong(i)) for i in range(WRONG_PASSWORDS)))  # fmt: skip

    asyncio.run(main())


def _keep_alive_flood(
    port: int, context: ssl.SSLContext, stop: threading.Event, count: list[int], connections: int
) -> None:
    """``connections`` keep-alive TLS connections from one address (127.0.0.4), each asking for
    ``/healthz`` again as soon as the answer comes (issue 40's first case, over TLS)."""

    async def main() -> None:
        await asyncio.gather(*(_looping_client(port, context, stop, count, KEEP_ALIVE_SOURCE, lambda _: HEALTHZ)
                               for _ in range(connections)))  # fmt: skip

    asyncio.run(main())


def hostile(seconds: float, gpus: int = 64, keep_alive_flood: int = KEEP_ALIVE_FLOOD) -> dict[str, Any]:
    """Run the attack for ``seconds``; the valid scrapes, the memory samples and totals."""
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-hostile-") as tmp:
        work = Path(tmp)
        fake = build(work / "fake")
        scenario = write(work, Size(gpus))
        scenario.write_text(scenario.read_text() + _churn(gpus))
        running = _start(work, fake, scenario)
        context = ssl.create_default_context(cafile=str(work / "server.crt"))
        url = f"https://127.0.0.1:{running.port}/metrics"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url, verify=context, auth=("prometheus", "s3cret"), timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or running.process.poll() is not None:
                    raise RuntimeError(f"gpu-exporter did not start:\n{running.log_tail()}")
                time.sleep(0.2)
            rss_idle = procfs.rss_bytes(running.pid)
            # The attack runs in a process of its own: in this one its threads would starve the honest
            # scraper of the interpreter, and the figures would be the benchmark's, not the exporter's.
            spawn = multiprocessing.get_context("spawn")
            stop, counts = spawn.Event(), spawn.Array("q", 4)
            attack = spawn.Process(
                target=_attack, args=(running.port, str(work / "server.crt"), stop, counts, keep_alive_flood)
            )
            overflows_before = _listen_overflows()
            attack.start()
            scrapes: list[dict[str, Any]] = []
            logins: list[dict[str, Any]] = []
            samples: list[dict[str, Any]] = []
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                began = time.monotonic()
                honest = _timed(url, HONEST, context, "prometheus", "s3cret")
                scrapes.append({"t_s": round(began - started, 1), **honest})
                if len(logins) < min(FIRST_LOGINS, (began - started) // FIRST_LOGIN_EVERY):
                    n = len(logins)
                    first = _timed(url, f"127.0.3.{1 + n}", context, f"first-{n}", "first-login")
                    logins.append({"t_s": round(time.monotonic() - started, 1), **first})
                samples.append({"t_s": round(time.monotonic() - started, 1), "rss_bytes": procfs.rss_bytes(running.pid),
                                "cpu_s": round(procfs.cpu_seconds(running.pid), 2),
                                "listen_overflows": _listen_overflows() - overflows_before})  # fmt: skip
                time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
            peak = _peak(running.pid)
            stop.set()
            attack.join(60)
            if attack.is_alive():
                attack.kill()
            aborted, wrong, closed, keep_alive = (int(counts[i]) for i in range(4))
        finally:
            running.stop()
    ok = [s["seconds"] for s in scrapes if s["status"] == 200]
    first_ok = [s["seconds"] for s in logins if s["status"] == 200]
    return {
        "first_logins": len(logins), "first_logins_ok": len(first_ok), "first_login_max_s": max(first_ok, default=0.0),
        "handshake_flood_closed": closed, "logins": logins,
        "seconds": seconds, "gpus": gpus, "rss_idle_bytes": rss_idle, "rss_peak_bytes": peak,
        "rss_last_bytes": samples[-1]["rss_bytes"] if samples else 0, "valid_scrapes": len(scrapes),
        "valid_ok": len(ok), "valid_max_s": max(ok, default=0.0),
        "valid_p99_s": sorted(ok)[max(0, int(len(ok) * 0.99) - 1)] if ok else 0.0,
        "aborted_handshakes": aborted, "wrong_password_answers": wrong, "keep_alive_answers": keep_alive,
        "rss_level_off_s": level_off(samples), "rss_halves_peak_bytes": _halves_peak(samples),
        "keep_alive_flood": keep_alive_flood,
        "listen_overflows": samples[-1]["listen_overflows"] if samples else 0, "scrapes": scrapes, "samples": samples,
    }  # fmt: skip


def _listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (TcpExt ListenOverflows,
    this network namespace): a new peer's SYN lost there waits for its retransmit (1 s, 3 s, 7 s)."""
    head, values = [
        line.split() for line in Path("/proc/net/netstat").read_text().splitlines() if line.startswith("TcpExt:")
    ]
    return int(dict(zip(head, values, strict=True)).get("ListenOverflows", 0))


def _halves_peak(samples: list[dict[str, Any]]) -> tuple[int, int]:
    """Peak RSS in the first and in the second half of the run: under an attack whose connections come and
    go, RSS moves by megabytes from second to second, so memory is flat when the second half's peak is not
    above the first's (bench.soak's 128 KiB rule is for a steady load)."""
    half = len(samples) // 2
    return (max((s["rss_bytes"] for s in samples[:half]), default=0),
            max((s["rss_bytes"] for s in samples[half:]), default=0))  # fmt: skip


def _attack(port: int, cafile: str, stop: Any, counts: Any, keep_alive_flood: int) -> None:
    """Every attack at once until ``stop`` is set (in a process of its own); ``counts``: aborted
    handshakes, wrong-password answers, handshake-flood connections the exporter closed."""
    context = ssl.create_default_context(cafile=cafile)
    done = threading.Event()
    aborted, wrong, keep_alive = [0], [0], [0]
    attackers = [
        threading.Thread(target=_slow_readers, args=(port, context, done), daemon=True),
        threading.Thread(target=_aborts, args=(port, done, aborted), daemon=True),
        threading.Thread(target=_wrong_passwords, args=(port, context, done, wrong), daemon=True),
        threading.Thread(
            target=_keep_alive_flood, args=(port, context, done, keep_alive, keep_alive_flood), daemon=True
        ),
    ]
    with Flood(port, HANDSHAKE_FLOOD, source="127.0.0.3", hello=b"\x16") as flood:
        for attacker in attackers:
            attacker.start()
        stop.wait()
        done.set()
        closed = flood.closed
    for attacker in attackers:
        attacker.join(40)
    counts[0], counts[1], counts[2], counts[3] = aborted[0], wrong[0], closed, keep_alive[0]


def _timed(url: str, source: str, context: ssl.SSLContext, user: str, password: str) -> dict[str, Any]:
    """One request on a new connection from ``source``: its time and status (or the error's name)."""
    began = time.monotonic()
    status: int | str
    try:
        status = fresh_scrape(url, source, context, auth=(user, password)).status_code
    except httpx.HTTPError as err:
        status = type(err).__name__
    return {"seconds": round(time.monotonic() - began, 3), "status": status}


def _peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument(
        "--keep-alive-flood",
        type=int,
        default=KEEP_ALIVE_FLOOD,
        help="keep-alive TLS connections from 127.0.0.4 (0: none)",
    )
    args = parser.parse_args()
    result = hostile(args.seconds, args.gpus, args.keep_alive_flood)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    mib = 1024 * 1024
    print(f"valid scrapes {result['valid_ok']}/{result['valid_scrapes']} ok, max {result['valid_max_s']:.2f} s, "
          f"p99 {result['valid_p99_s']:.2f} s; RSS idle {result['rss_idle_bytes'] / mib:.0f} MiB, peak "
          f"{result['rss_peak_bytes'] / mib:.0f} MiB, last {result['rss_last_bytes'] / mib:.0f} MiB; first logins "
          f"{result['first_logins_ok']}/{result['first_logins']} ok, max {result['first_login_max_s']:.2f} s; "
          f"{result['handshake_flood_closed']} flood connections closed; "
          f"{result['aborted_handshakes']} aborted handshakes, {result['wrong_password_answers']} wrong-password "
          f"answers, {result['keep_alive_answers']} keep-alive flood answers; "
          f"RSS peak {result['rss_halves_peak_bytes'][0] / mib:.0f} MiB in the first half, "
          f"{result['rss_halves_peak_bytes'][1] / mib:.0f} MiB in the second; "
          + (f"level from {result['rss_level_off_s']:g} s on (never {LEVEL_BYTES // 1024} KiB above); "
             if result["rss_level_off_s"] is not None else "")
          + f"{result['listen_overflows']} listen-queue overflows")  # fmt: skip


if __name__ == "__main__":
    main()
