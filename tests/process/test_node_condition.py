"""``--kubernetes.node-condition``: the exporter (on the fake NVML) keeps a condition on its node's
status through an API-server stand-in (tests/kubeapi_server.py): True while healthy, keeping the
lastTransitionTime the node already had; False naming the GPU and the action when the driver asks for
a reset; True again; one PATCH per transition and none between; with --kubernetes.node-condition-events
one Event per transition (none at the start, where the node already had True); a refusing API server is
retried with backoff and shows in the self-metrics, and the condition and its Event catch up once it
accepts again."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Exporter, samples, start
from tests.kubeapi_server import NODE, KubeApi, api_node
from tests.webtls import Certs, make_certs

TYPE = "GPUHealthy"
SOURCE = frozenset({("source", "kubernetes_node_condition")})
EVENTS = frozenset({("source", "kubernetes_node_events")})
SEEDED = "2026-01-01T00:00:00Z"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApi]:
    certs: Certs = make_certs(tmp_path / "certs")
    server = KubeApi(certs)
    node = api_node()
    node["status"]["conditions"].append({"type": TYPE, "status": "True", "reason": "GPUsHealthy", "message": "",
                                         "lastHeartbeatTime": SEEDED, "lastTransitionTime": SEEDED})  # fmt: skip
    server.nodes = {NODE: node}
    server.start()
    yield server
    server.stop()


def _scenario(path: Path, action: int) -> None:
    path.write_text(
        "driver_version = 550.54.15\ndevice_count = 1\ngpu0.name = NVIDIA H100 80GB HBM3\n"
        f"gpu0.uuid = GPU-00000000-0000-0000-0000-000000000000\ngpu0.recovery_action = {action}\n"
    )


def _until(what: Callable[[], Any], deadline_s: float = 30) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {deadline_s} s: {what}")


def _cycles_pass(exporter: Exporter, count: int) -> None:
    """Wait until the exporter has sampled ``count`` more cycles (its last-sample timestamp moved on)."""

    def stamp() -> float:
        return next(iter(samples(exporter.metrics())["gpu_exporter_last_sample_timestamp_seconds"].values()))

    first = stamp()
    _until(lambda: stamp() >= first + count)


def test_condition_follows_health_once_per_transition(fakenvml_dir: Path, tmp_path: Path, api: KubeApi) -> None:
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    scenario = tmp_path / "host.scn"
    _scenario(scenario, 0)
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--kubernetes.node-condition", TYPE, "--kubernetes.api-url", api.url,
        "--kubernetes.node-name", NODE, "--kubernetes.kubelet-token-file", str(token),
        "--kubernetes.kubelet-ca-file", str(api.certs.path("ca.crt")), "--kubernetes.node-condition-events",
    )  # fmt: skip
    try:
        healthy = _until(lambda: api.patches and api.condition(NODE, TYPE))
        assert (healthy["status"], healthy["reason"], healthy["message"]) == ("True", "GPUsHealthy", "1 GPU healthy")
        assert healthy["lastTransitionTime"] == SEEDED and healthy["lastHeartbeatTime"] != SEEDED  # no change
        assert api.paths()[0] == f"/api/v1/nodes/{NODE}"  # read once, before the first patch

        _scenario(scenario, 1)  # the driver asks for a GPU reset
        failed = _until(lambda: (c := api.condition(NODE, TYPE)) and c["status"] == "False" and c)
        assert failed["reason"] == "GPUResetNeeded"
        assert failed["message"] == "GPU 0: the driver asks for recovery action 1: reset_gpu"
        assert failed["lastTransitionTime"] != SEEDED
        _cycles_pass(exporter, 3)
        assert len(api.patches) == 2  # one per transition: nothing while it stays the same
        assert [(e["type"], e["reason"]) for e in api.events] == [("Warning", "GPUResetNeeded")]  # none at start
        assert api.events[0]["message"] == f"{TYPE} is False: {failed['message']}"

        _scenario(scenario, 0)
        _until(lambda: api.condition(NODE, TYPE)["status"] == "True")
        _cycles_pass(exporter, 2)
        assert len(api.patches) == 3
        assert [e["reason"] for e in api.events] == ["GPUResetNeeded", "GPUsHealthy"]
        assert api.condition(NODE, "Ready")["reason"] == "KubeletReady"  # the kubelet's condition untouched

        api.status = 403  # RBAC taken away: retried with backoff, counted, never blocking sampling
        _scenario(scenario, 1)

        def refused() -> bool:
            parsed = samples(exporter.metrics())
            up = parsed["gpu_exporter_source_up"].get(SOURCE)
            failures = parsed.get("gpu_exporter_source_failures_total", {})
            return up == 0 and failures.get(SOURCE | {("kind", "unauthorized")}, 0) >= 1

        _until(refused)
        assert api.condition(NODE, TYPE)["status"] == "True" and len(api.patches) == 3
        api.status = 200
        _until(lambda: api.condition(NODE, TYPE)["status"] == "False")
        assert len(api.patches) == 4
        _until(lambda: len(api.events) == 3)
        assert api.events[-1]["reason"] == "GPUResetNeeded"
        _until(lambda: samples(exporter.metrics())["gpu_exporter_source_up"].get(SOURCE) == 1)
        assert samples(exporter.metrics())["gpu_exporter_source_up"].get(EVENTS) == 1
    finally:
        exporter.stop()
