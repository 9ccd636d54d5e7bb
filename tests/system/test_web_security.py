"""TLS, mutual TLS and basic auth from an exporter-toolkit web config, against the real exporter on
loopback with real clients (httpx over Python's ssl, curl), certificates made by openssl here."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gpu_exporter.http.webconfig import WebConfigError, load
from tests.flood import fresh_scrape
from tests.harness import REPO, Exporter
from tests.webtls import Certs, bcrypt_hash, issue, launch, make_ca, make_certs, open_fds

EXAMPLES = REPO / "docs" / "web-config"


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Client sockets a test opens; all closed at teardown, also when the test fails."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _web_config(directory: Path, text: str, certs: Certs) -> Path:
    for name in ("ca.crt", "server.crt", "server.key"):
        shutil.copy(certs.path(name), directory / name)
    path = directory / "web.yml"
    path.write_text(text)
    return path


def _https(exporter: Exporter, context: ssl.SSLContext, path: str = "/metrics", **kwargs: object) -> httpx.Response:
    with httpx.Client(verify=context, timeout=10) as client:
        return client.get(f"https://127.0.0.1:{exporter.port}{path}", **kwargs)  # type: ignore[arg-type]


def _wait(check: Callable[[], bool], what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.TransportError, ssl.SSLError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds}s: {what}")


def _curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True, text=True, check=False)


def test_tls_basic_auth_rotation_and_reload(fakenvml_dir: Path, tmp_path: Path, certs: Certs) -> None:
    context = certs.client_context(with_client_cert=False)
    alice = bcrypt_hash("s3cret")
    config = _web_config(
        tmp_path,
        "tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
        f"basic_auth_users: {{alice: '{alice}'}}\n"
        "http_server_config: {headers: {X-Content-Type-Options: nosniff, X-Frame-Options: deny}}\n",
        certs,
    )
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--collect-interval", "1h")
    try:
        good = _https(exporter, context, auth=("alice", "s3cret"))
        assert good.status_code == 200 and "gpu_power_watts{" in good.text
        assert good.headers["x-content-type-options"] == "nosniff" and good.headers["x-frame-options"] == "deny"
        wrong = _https(exporter, context, auth=("alice", "wrong"))
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Basic")
        assert "gpu_" not in wrong.text
        assert _https(exporter, context).status_code == 401
        assert _https(exporter, context, auth=("mallory", "s3cret")).status_code == 401
        assert _https(exporter, context, "/healthz").status_code == 401  # probes are protected by default
        # many scrapes with the same credentials: bcrypt is paid once (the cache), so this is quick
        started = time.monotonic()
        for _ in range(30):
            assert _https(exporter, context, "/healthz", auth=("alice", "s3cret")).status_code == 200
        assert time.monotonic() - started < 20

        curl = _curl(
            "--cacert", str(certs.path("ca.crt")), "-u", "alice:s3cret", f"https://127.0.0.1:{exporter.port}/metrics"
        )
        assert curl.returncode == 0 and "gpu_power_watts{" in curl.stdout, curl.stderr

        # plain HTTP to the TLS port: refused with a 400 that says why, never metrics
        plain = httpx.get(f"http://127.0.0.1:{exporter.port}/metrics", auth=("alice", "s3cret"), timeout=10)
        assert plain.status_code == 400 and "HTTPS" in plain.text

        # a new certificate from a new CA, written over the old files: the next connection uses it
        make_ca(tmp_path, "ca2")
        issue(tmp_path, "server2", "/CN=gpu-exporter rotated", "IP:127.0.0.1", ca="ca2")
        shutil.copy(tmp_path / "server2.key", tmp_path / "server.key")
        shutil.copy(tmp_path / "server2.crt", tmp_path / "server.crt")
        rotated = ssl.create_default_context(cafile=str(tmp_path / "ca2.crt"))
        _wait(lambda: _https(exporter, rotated, auth=("alice", "s3cret")).status_code == 200, "rotated certificate")
        with pytest.raises(httpx.ConnectError):
            _https(exporter, context, auth=("alice", "s3cret"))

        # users changed in the file: picked up without a restart
        config.write_text(config.read_text().replace(f"alice: '{alice}'", f"bob: '{bcrypt_hash('hunter2')}'"))
        _wait(lambda: _https(exporter, rotated, auth=("bob", "hunter2")).status_code == 200, "new user")
        assert _https(exporter, rotated, auth=("alice", "s3cret")).status_code == 401

        # a broken edit keeps the config in force and says so in one line
        config.write_text("tls_server_config: {cert_file: missing.crt, key_file: server.key}\n")
        _wait(lambda: "web config not reloaded" in exporter.log(), "reload error logged")
        assert _https(exporter, rotated, auth=("bob", "hunter2")).status_code == 200
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0
    assert "Traceback" not in exporter.log()


def test_mtls_require_and_verify(fakenvml_dir: Path, tmp_path: Path, certs: Certs) -> None:
    config = _web_config(
        tmp_path,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        "  client_allowed_sans: [prometheus.example]\n",
        certs,
    )
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--collect-interval", "1h")
    try:
        assert _https(exporter, certs.client_context()).status_code == 200
        curl = _curl(
            "--cacert", str(certs.path("ca.crt")), "--cert", str(certs.path("client.crt")),
            "--key", str(certs.path("client.key")), f"https://127.0.0.1:{exporter.port}/metrics",
        )  # fmt: skip
        assert curl.returncode == 0 and "gpu_power_watts{" in curl.stdout, curl.stderr
        # no client certificate: the handshake is refused
        with pytest.raises(httpx.TransportError):
            _https(exporter, certs.client_context(with_client_cert=False))
        refused = _curl("--cacert", str(certs.path("ca.crt")), f"https://127.0.0.1:{exporter.port}/metrics")
        assert refused.returncode != 0 and "gpu_" not in refused.stdout
        # a certificate from the right CA whose SAN is not allowed: closed, no metrics
        with pytest.raises(httpx.TransportError):
            _https(exporter, certs.client_context(client="other"))
        # a client certificate from a CA the exporter does not trust
        make_ca(tmp_path, "rogue")
        issue(tmp_path, "rogueclient", "/CN=prometheus", "DNS:prometheus.example", ca="rogue")
        rogue = certs.client_context(with_client_cert=False)
        rogue.load_cert_chain(str(tmp_path / "rogueclient.crt"), str(tmp_path / "rogueclient.key"))
        with pytest.raises(httpx.TransportError):
            _https(exporter, rogue)
        assert _https(exporter, certs.client_context()).status_code == 200  # still serving
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0


def _write(directory: Path, certs: Certs, text: str) -> str:
    return str(_web_config(directory, text, certs))


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("tls_server_config: {cert_file: nope.crt, key_file: server.key}\n", "tls_server_config.cert_file='nope.crt'"),
        ("tls_server_config: {cert_file: server.crt}\n", "tls_server_config.key_file is missing"),
        ("tls_server_config: {cert_file: /dev/zero, key_file: server.key}\n", "is a character device"),
        ("tls_server_config: {cert_file: ., key_file: server.key}\n", "is a directory"),
        ("tls_server_config: {cert_file: server.crt, key_file: /proc/self/mem}\n", "key_file='/proc/self/mem'"),
        ("tls_server_config: {cert_file: server.key, key_file: server.key}\n", "cannot be used"),
        ("tls_server_config: {cert_file: ca.crt, key_file: server.key}\n", "cannot be used"),
        (TLS + "  client_auth_type: Sometimes\n", "client_auth_type='Sometimes' is not one of"),
        (TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n", "is not supported"),
        (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "client_ca_file is missing"),
        (TLS + "  client_ca_file: ca.crt\n", "client_auth_type is NoClientCert"),
        (TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: server.key\n", "no usable CA"),
        (TLS + "  min_version: TLS14\n", "min_version='TLS14' is not one of"),
        (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version is above max_version"),
        (TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "cipher_suites has 'TLS_RSA_WITH_RC4_128_SHA'"),
        (TLS + "  curve_preferences: [P256]\n", "curve_preferences has 'P256'"),
        (TLS + "  client_allowed_sans: [a]\n", "needs client_auth_type RequireAndVerifyClientCert"),
        (TLS + "  prefer_server_cipher_suites: maybe\n", "must be true or false"),
        (TLS + "  cert_fil: x\n", "tls_server_config.cert_fil is not a known key"),
        ("tls_srever_config: {}\n", "'tls_srever_config' is not a known key"),
        ("rate_limit: {interval: 1s, burst: 2}\n", "rate_limit is not supported"),
        ("http_server_config: {headers: {X-Frame-Options: allow}}\n", "X-Frame-Options='allow' is not allowed"),
        ("http_server_config: {headers: {Set-Cookie: a}}\n", "headers.Set-Cookie is not one of"),
        ("http_server_config: {http2: yes please}\n", "http2='yes please' must be true or false"),
        ("basic_auth_users: {alice: plaintext}\n", "basic_auth_users.alice is not a bcrypt hash"),
        ("basic_auth_users: [alice]\n", "basic_auth_users must be a mapping"),
        ("basic_auth_users: {'a:b': '$2y$04$" + "a" * 53 + "'}\n", "not a usable user name"),
        ("- just\n- a list\n", "the file must be a mapping"),
        ("tls_server_config: {cert_file: [\n", "fix the YAML syntax"),
        ("a: &a [*a]\n", "refers to itself"),
    ],
)
def test_bad_web_config_names_the_key(tmp_path: Path, certs: Certs, text: str, needle: str) -> None:
    path = _write(tmp_path, certs, text)
    with pytest.raises(WebConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert needle in message and "\n" not in message and message.startswith("--web.config.file=")


def test_bad_web_config_exits_2_with_one_line(tmp_path: Path, certs: Certs) -> None:
    path = _write(tmp_path, certs, TLS + "  client_auth_type: RequireAndVerifyClientCert\n")
    result = subprocess.run([sys.executable, "-m", "gpu_exporter", "--web-config-file", path],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "client_ca_file is missing" in result.stderr


def test_shipped_examples_pass_promtool_and_load(tmp_path: Path, certs: Certs) -> None:
    examples = sorted(EXAMPLES.glob("*.yml"))
    assert len(examples) >= 3
    for example in examples:
        path = _web_config(tmp_path, example.read_text(), certs)
        result = subprocess.run(["promtool", "check", "web-config", str(path)], capture_output=True, text=True,
                                timeout=60, check=False)  # fmt: skip
        assert result.returncode == 0, f"{example.name}: {result.stdout}{result.stderr}"
        load(str(path))


def test_tls_handshake_never_completed_is_closed(fakenvml_dir: Path, tmp_path: Path, certs: Certs) -> None:
    config = _web_config(tmp_path, TLS, certs)
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--web.read-header-timeout", "1s")
    try:
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            started = time.monotonic()
            assert sock.recv(100) == b""  # closed by the exporter
            assert time.monotonic() - started < 5
        assert _https(exporter, certs.client_context(with_client_cert=False)).status_code == 200
    finally:
        exporter.stop()


def test_cap_sheds_stalled_tls_handshakes_and_idle_keepalives(
    fakenvml_dir: Path, tmp_path: Path, certs: Certs, sockets: list[socket.socket]
) -> None:
    """With 8 connections allowed, 30 clients from one address stuck mid-handshake cannot lock out a
    scrape from another address, and a keep-alive connection idle past --web.idle-timeout is closed
    quietly."""
    config = _web_config(tmp_path, TLS, certs)
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--web.max-connections", "8",
                      "--web.idle-timeout", "1s", "--collect-interval", "1h")  # fmt: skip
    context = certs.client_context(with_client_cert=False)
    try:
        stuck = sockets
        for _ in range(30):
            sock = socket.create_connection(("127.0.0.1", exporter.port), timeout=10)
            sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello that never completes
            stuck.append(sock)
        started = time.monotonic()
        assert fresh_scrape(f"https://127.0.0.1:{exporter.port}/metrics", "127.0.0.2", context).status_code == 200
        assert time.monotonic() - started < 5
        assert open_fds(exporter.process.pid) < 25  # the cap held: the stalled handshakes were dropped
        for sock in stuck:
            sock.close()
        raw = socket.create_connection(("127.0.0.1", exporter.port), timeout=10)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert tls.recv(65536).startswith(b"HTTP/1.1 200")
            tls.settimeout(5)
            started = time.monotonic()
            assert tls.recv(100) == b""  # closed by the exporter after the idle timeout
            assert time.monotonic() - started < 4
        assert "Traceback" not in exporter.log()
    finally:
        exporter.stop()


def test_inline_certificates_and_keys(tmp_path: Path, certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    """cert, key and client_ca given inline (PEM in the YAML) load like their _file forms."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def block(name: str) -> str:
        return "|\n" + "".join(f"    {line}\n" for line in certs.path(name).read_text().splitlines())

    path = tmp_path / "inline.yml"
    path.write_text(
        "tls_server_config:\n"
        f"  cert: {block('server.crt')}  key: {block('server.key')}  client_ca: {block('ca.crt')}"
        "  client_auth_type: RequireAndVerifyClientCert\n"
    )
    config = load(str(path))
    assert config.tls is not None and config.tls.verify_mode == ssl.CERT_REQUIRED
    assert not list(scratch.iterdir())  # the temporary copies of the PEM text are gone
