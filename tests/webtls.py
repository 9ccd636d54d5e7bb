"""Helpers for the security and robustness tests: certificates made with the openssl command, bcrypt
hashes, and starting the real exporter when its port may speak TLS (so the harness's plain-HTTP
readiness poll cannot be used)."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bcrypt

from tests.harness import SCENARIOS, Exporter, bound_port, log_name


@dataclass(frozen=True)
class Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all in ``directory``."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    def client_context(self, with_client_cert: bool = True, client: str = "client") -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.path("ca.crt")))
        if with_client_cert:
            context.load_cert_chain(str(self.path(f"{client}.crt")), str(self.path(f"{client}.key")))
        return context


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def issue(directory: Path, name: str, subject: str, san: str, ca: str = "ca") -> None:
    """``name``.key and ``name``.crt signed by ``ca`` with subjectAltName ``san``."""
    (directory / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)  # fmt: skip


def make_ca(directory: Path, name: str = "ca") -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN=gpu-exporter test {name}", "-days", "2",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)  # fmt: skip


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    make_ca(directory)
    issue(directory, "server", "/CN=gpu-exporter", "IP:127.0.0.1,DNS:localhost")
    issue(directory, "client", "/CN=prometheus", "DNS:prometheus.example")
    issue(directory, "other", "/CN=intruder", "DNS:intruder.example")
    return Certs(directory)


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash as htpasswd writes it ($2y$), cost 4 to keep the tests fast."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)


def launch(
    fakenvml_dir: Path,
    workdir: Path,
    *args: str,
    ready: Callable[[Exporter], bool] | None = None,
    scenario: str | Path = "h100x4.scn",
    prefix: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Exporter:
    """Start the real exporter on a free loopback port; wait until ``ready`` (default: the port
    accepts connections) holds."""
    log_path = workdir / f"{log_name('exporter')}.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_", "DCGM_"))}
    child_env["LD_LIBRARY_PATH"] = str(fakenvml_dir)
    child_env["FAKE_NVML_SCENARIO"] = str(SCENARIOS / scenario)
    child_env.update(env or {})
    command = [*prefix, sys.executable, "-m", "gpu_exporter", "--web.listen-address", "127.0.0.1:0", *args]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=child_env, cwd=workdir)
    try:
        port = bound_port(log_path, lambda: process.poll() is None)
    except AssertionError:
        Exporter(process, 0, log_path).stop()
        raise
    exporter = Exporter(process, port, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"exporter exited with {process.returncode}:\n{exporter.log()}")
        try:
            if ready(exporter) if ready else _accepts(port):
                return exporter
        except (OSError, ssl.SSLError):
            pass
        time.sleep(0.1)
    exporter.stop()
    raise AssertionError(f"exporter not ready in 30 s:\n{exporter.log()}")


def _accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))
