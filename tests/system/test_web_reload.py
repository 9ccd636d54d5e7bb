"""Web config reloads against the real exporter on loopback: a key that cannot load and a file cut
short while it is rewritten in place keep the previous config in force (never fail open), log one
line, and the exporter keeps watching."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.harness import Exporter
from tests.system.test_web_security import _https, _wait
from tests.webtls import Certs, bcrypt_hash, issue, launch, make_ca, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _setup(directory: Path, certs: Certs) -> tuple[Path, str]:
    for name in ("ca.crt", "server.crt", "server.key"):
        shutil.copy(certs.path(name), directory / name)
    text = (
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        f"basic_auth_users:\n  alice: '{bcrypt_hash('s3cret')}'\n"
    )
    path = directory / "web.yml"
    path.write_text(text)
    return path, text


def _until(check: Callable[[], bool], what: str, seconds: float = 20) -> None:
    _wait(check, what, seconds)


def _ready(context: ssl.SSLContext) -> Callable[[Exporter], bool]:
    return lambda exporter: _https(exporter, context, auth=("alice", "s3cret")).status_code == 200


def test_key_that_cannot_load_keeps_the_previous_config(fakenvml_dir: Path, tmp_path: Path, certs: Certs) -> None:
    config, _ = _setup(tmp_path, certs)
    context = certs.client_context(with_client_cert=False)
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--collect-interval", "1h",
                      ready=_ready(context))  # fmt: skip
    try:
        # the key replaced by the same key with a passphrase (as a rename, so it is never half written)
        subprocess.run(["openssl", "pkey", "-in", "server.key", "-aes256", "-passout", "pass:x", "-out", "enc.key"],
                       cwd=tmp_path, check=True, capture_output=True, timeout=60)  # fmt: skip
        os.replace(tmp_path / "enc.key", tmp_path / "server.key")
        _until(lambda: "key_file is encrypted" in exporter.log(), "the encrypted key is named in the log")
        good = _https(exporter, context, auth=("alice", "s3cret"))
        assert good.status_code == 200 and "gpu_power_watts{" in good.text  # the previous config serves on
        assert _https(exporter, context).status_code == 401
        # the exporter keeps watching: a new key and certificate (new CA) are picked up
        make_ca(tmp_path, "ca2")
        issue(tmp_path, "server2", "/CN=gpu-exporter rotated", "IP:127.0.0.1", ca="ca2")
        shutil.copy(tmp_path / "server2.crt", tmp_path / "server.crt.new")
        shutil.copy(tmp_path / "server2.key", tmp_path / "server.key.new")
        os.replace(tmp_path / "server.crt.new", tmp_path / "server.crt")
        os.replace(tmp_path / "server.key.new", tmp_path / "server.key")
        rotated = ssl.create_default_context(cafile=str(tmp_path / "ca2.crt"))
        _until(lambda: _ready(rotated)(exporter), "rotated certificate")
    finally:
        exporter.stop()
    log = exporter.log()
    assert exporter.process.returncode == 0, log
    assert log.count("key_file is encrypted") == 1, log  # one line, not one per check
    assert "Traceback" not in log and "Enter PEM pass phrase" not in log, log


def test_encrypted_key_at_start_exits_2_with_one_line(tmp_path: Path, certs: Certs) -> None:
    config, _ = _setup(tmp_path, certs)
    subprocess.run(["openssl", "pkey", "-in", "server.key", "-aes256", "-passout", "pass:x", "-out", "enc.key"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=60)  # fmt: skip
    os.replace(tmp_path / "enc.key", tmp_path / "server.key")
    command = [sys.executable, "-m", "gpu_exporter", "--web.config.file", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "key_file is encrypted" in result.stderr, result.stderr


def test_web_config_cut_short_while_rewritten_never_fails_open(
    fakenvml_dir: Path, tmp_path: Path, certs: Certs
) -> None:
    config, whole = _setup(tmp_path, certs)
    context = certs.client_context(with_client_cert=False)
    exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--collect-interval", "1h",
                      ready=_ready(context))  # fmt: skip
    try:
        # rewritten in place and cut before basic_auth_users: TLS without auth is valid YAML, but not applied
        config.write_text(whole[: whole.index("basic_auth_users")])
        _until(lambda: "turns off basic auth" in exporter.log(), "the cut file refused")
        assert _https(exporter, context).status_code == 401
        assert _https(exporter, context, auth=("alice", "s3cret")).status_code == 200
        # cut to nothing: neither TLS nor auth is dropped
        config.write_text("")
        _until(lambda: "turns off TLS, basic auth" in exporter.log(), "the empty file refused")
        plain = httpx.get(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10)
        assert plain.status_code == 400 and "gpu_" not in plain.text
        assert _https(exporter, context).status_code == 401
        # written whole again: loaded
        loads = exporter.log().count("web config ")
        config.write_text(whole.replace("alice", "bob"))
        _until(lambda: _https(exporter, context, auth=("bob", "s3cret")).status_code == 200, "the whole file loaded")
        assert exporter.log().count("web config ") == loads + 1
        # dropping auth on purpose: SIGHUP applies what the file says
        config.write_text(whole[: whole.index("basic_auth_users")])
        exporter.process.send_signal(signal.SIGHUP)
        _until(lambda: _https(exporter, context).status_code == 200, "auth off after SIGHUP")
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0
    assert "Traceback" not in exporter.log()
