"""The node-label pause from outside (issue 37, Kubernetes): one exporter process on the fake NVML with its
call trace, reading its node from the API-server double (tests/kubeapi_server.py, TLS and a bearer token)
with --kubernetes.node-pause: the label gpu-exporter.io/pause=full releases NVML (nvmlShutdown, then no
call) while /metrics says paused until the annotation's end; removing the label brings every GPU back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.control.nodelabel import FOR_ANNOTATION, LABEL
from tests.harness import SCENARIOS, Exporter, samples, start, value
from tests.kubeapi_server import NODE, KubeApi
from tests.webtls import Certs, make_certs

Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApi]:
    server = KubeApi(make_certs(tmp_path / "certs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _until(exporter: Exporter, done: Callable[[Parsed], bool], seconds: float = 30.0) -> Parsed:
    deadline = time.monotonic() + seconds
    while True:
        parsed = samples(exporter.metrics())
        if done(parsed):
            return parsed
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def _node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    metadata = {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, **labels}, "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata}


def _calls(exporter: Exporter) -> list[str]:
    assert exporter.trace_path is not None
    return [line.split()[0] for line in exporter.trace_path.read_text().splitlines() if line.strip()]


def test_a_node_label_pauses_and_its_removal_resumes(fakenvml_dir: Path, api: KubeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    certs: Certs = api.certs
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "300ms", "--kubernetes.node-pause",
        "--kubernetes.api-url", api.url, "--kubernetes.node-name", NODE, "--kubernetes.kubelet-token-file",
        str(token), "--kubernetes.kubelet-ca-file", str(certs.path("ca.crt")), trace=True,
    )  # fmt: skip
    try:
        _until(exporter, lambda p: value(p, "gpu_up", gpu="0") == 1)
        # the node as the API server has it (replaced whole: the double serves it from its own thread)
        api.nodes[NODE] = _node({LABEL: "full"}, {FOR_ANNOTATION: "20m"})
        paused = _until(exporter, lambda p: value(p, "gpu_exporter_backend_up") == 0)
        assert value(paused, "gpu_exporter_paused", scope="full") == 1 and value(paused, "gpu_up", gpu="0") is None
        end = value(paused, "gpu_exporter_pause_end_timestamp_seconds", scope="full")
        assert end is not None and 19 * 60 < end - time.time() <= 20 * 60
        source = exporter.get("/api/v1/status").json()["paused"]["source"]
        assert source == f"node label {LABEL}=full"
        calls = _calls(exporter)
        assert "nvmlShutdown" in calls
        api.nodes[NODE] = _node({}, {FOR_ANNOTATION: "20m"})  # the label removed
        back = _until(exporter, lambda p: value(p, "gpu_up", gpu="3") == 1)
        assert value(back, "gpu_exporter_paused", scope="full") == 0
        shutdown = len(calls) - calls[::-1].index("nvmlShutdown")
        assert _calls(exporter)[shutdown].startswith("nvmlInit")  # nothing between the two
    finally:
        exporter.stop()
    assert f"/api/v1/nodes/{NODE}" in api.paths()
