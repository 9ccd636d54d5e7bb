"""``--kubernetes.expected-gpus-label``: the exporter (on the fake NVML, one GPU) takes the GPUs its node
should have from a label of its Node, read from the API-server stand-in (tests/kubeapi_server.py) by the
same node reader as the pause label: 2 turns the health model to fail with one GPU missing, relabelling to
1 takes effect without a restart, a value that is no count is counted (source kubernetes_node, kind
invalid_label) and ignored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import samples, start
from tests.kubeapi_server import NODE, KubeApi, api_node
from tests.process.test_node_condition import _until
from tests.webtls import make_certs

LABEL = "gpu-exporter.io/expected-gpus"
NODE_SOURCE = frozenset({("source", "kubernetes_node")})


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApi]:
    server = KubeApi(make_certs(tmp_path / "certs"))
    server.nodes = {NODE: api_node()}
    server.start()
    yield server
    server.stop()


def _label(api: KubeApi, value: str) -> None:
    api.nodes[NODE] = {**api.nodes[NODE], "metadata": {**api.nodes[NODE]["metadata"], "labels": {LABEL: value}}}


def test_the_node_label_sets_the_expected_gpus_and_a_relabel_acts(
    fakenvml_dir: Path, tmp_path: Path, api: KubeApi
) -> None:
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    scenario = tmp_path / "host.scn"
    scenario.write_text(
        "driver_version = 550.54.15\ndevice_count = 1\ngpu0.name = NVIDIA H100 80GB HBM3\n"
        "gpu0.uuid = GPU-00000000-0000-0000-0000-000000000000\n"
    )
    _label(api, "2")
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--kubernetes.expected-gpus-label", LABEL, "--kubernetes.api-url", api.url,
        "--kubernetes.node-name", NODE, "--kubernetes.kubelet-token-file", str(token),
        "--kubernetes.kubelet-ca-file", str(api.certs.path("ca.crt")),
    )  # fmt: skip
    try:

        def expected() -> dict[str, Any]:
            parsed = samples(exporter.metrics())
            return {
                "expected": next(iter(parsed.get("gpu_exporter_gpus_expected", {}).values()), None),
                "present": next(iter(parsed["gpu_exporter_gpus_present"].values())),
                "up": parsed.get("gpu_exporter_source_up", {}).get(NODE_SOURCE),
                "invalid": parsed.get("gpu_exporter_source_failures_total", {}).get(
                    NODE_SOURCE | {("kind", "invalid_label")}, 0
                ),
            }

        _until(lambda: expected()["expected"] == 2)
        assert expected()["present"] == 1 and expected()["up"] == 1

        _label(api, "1")  # relabelled: no restart
        _until(lambda: expected()["expected"] == 1)
        _label(api, "two")
        _until(lambda: expected()["invalid"] == 1)
        assert expected()["expected"] is None  # ignored: no inventory
    finally:
        exporter.stop()
