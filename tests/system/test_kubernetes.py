"""Kubernetes attribution out of process: the real exporter asks a real gRPC pod-resources server
(tests/podresources_server.py) on a unix socket, on its own cadence, and joins the answer onto
its GPUs: gpu_allocation_info per pod container, the idle counter per allocation, and
dcgm-exporter's pod labels in compatibility mode. A kubelet that disappears and comes back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import REPO, SCENARIOS, start, value
from tests.podresources_server import FakeKubelet, pod
from tests.process.test_faults import wait_for

GPU0 = "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"
GPU2 = "GPU-4a1e0c2d-2b7f-4c3a-9e21-5d8f6a0b1c22"
COUNTERS = str(REPO / "tests" / "fixtures" / "default-counters.csv")


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    server = FakeKubelet(str(tmp_path / "kubelet.sock"))
    server.set_pods(
        pod("ml", "trainer-0", ("main", [("nvidia.com/gpu", [GPU0])])),
        pod("ml", "viz-1", ("ui", [("nvidia.com/gpu", ["nvidia1"])]), ("sidecar", [("cpu", ["0"])])),
        pod("team-a", "nb-1", ("lab", [("nvidia.com/gpu", [f"{GPU2}::0"])])),  # GPU 2 time-sliced
        pod("team-b", "nb-2", ("lab", [("nvidia.com/gpu", [f"{GPU2}::1"])])),
    )
    server.start()
    yield server
    server.stop()


def _flags(kubelet: FakeKubelet) -> tuple[str, ...]:
    return (
        "--kubernetes",
        "--kubernetes.pod-resources-socket",
        kubelet.socket_path,
        "--kubernetes.refresh-interval",
        "1s",
    )


def test_allocations_from_the_kubelet_asked_once_per_refresh(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet
) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "200ms", *_flags(kubelet))
    try:
        # Each GPU joins the kubelet's answer at its own read: wait until every GPU's read has.
        parsed = wait_for(
            exporter,
            lambda p: all(
                value(p, "gpu_allocation_info", pod=name) == 1 for name in ("nb-2", "trainer-0", "viz-1", "nb-1")
            ),
        )
        assert (
            value(parsed, "gpu_allocation_info", gpu="0", uuid=GPU0, namespace="ml", pod="trainer-0", container="main")
            == 1
        )
        assert value(parsed, "gpu_allocation_info", gpu="1", namespace="ml", pod="viz-1", container="ui") == 1
        assert value(parsed, "gpu_allocation_info", gpu="2", namespace="team-a", pod="nb-1") == 1
        assert not [labels for labels in parsed["gpu_allocation_info"] if dict(labels).get("container") == "sidecar"]
        assert value(parsed, "gpu_allocation_idle_seconds_total", pod="trainer-0") is not None
        assert value(parsed, "gpu_exporter_source_up", source="kubelet") == 1
        calls, began = kubelet.calls, time.monotonic()
        for _ in range(30):  # scrapes never reach the kubelet
            exporter.metrics()
        assert kubelet.calls - calls <= (time.monotonic() - began) / 1.0 + 1
        kubelet.stop()  # the kubelet restarts: the last answer is kept meanwhile, failures counted
        down = wait_for(exporter, lambda p: value(p, "gpu_exporter_source_up", source="kubelet") == 0)
        assert value(down, "gpu_allocation_info", pod="trainer-0") == 1
        assert sum(v for k, v in down["gpu_exporter_source_failures_total"].items()) >= 1
        kubelet.set_pods(pod("ml", "trainer-9", ("main", [("nvidia.com/gpu", [GPU0])])))
        kubelet.start()
        back = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", pod="trainer-9") == 1)
        assert value(back, "gpu_allocation_info", pod="trainer-0") is None
        assert value(back, "gpu_exporter_source_up", source="kubelet") == 1
    finally:
        exporter.stop()


def test_dcgm_exporter_mode_puts_pod_labels_on_exclusively_allocated_gpus(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet
) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "200ms", "-f", COUNTERS,
        *_flags(kubelet),
    )  # fmt: skip
    try:
        # Every GPU read (each GPU's first read lands on its own) and the pods joined.
        parsed = wait_for(
            exporter,
            lambda p: (
                value(p, "DCGM_FI_DEV_GPU_TEMP", pod="trainer-0") is not None
                and {dict(labels)["gpu"] for labels in p.get("DCGM_FI_DEV_GPU_TEMP", {})} == {"0", "1", "2", "3"}
            ),
        )
        assert value(parsed, "DCGM_FI_DEV_GPU_TEMP", gpu="0", pod="trainer-0", namespace="ml", container="main") == 71
        assert value(parsed, "DCGM_FI_DEV_GPU_TEMP", gpu="1", pod="viz-1") is not None
        # GPU 2 is shared by two pods: no copy per pod, no pod label
        gpu2 = [dict(labels) for labels in parsed["DCGM_FI_DEV_GPU_TEMP"] if dict(labels)["gpu"] == "2"]
        assert len(gpu2) == 1 and "pod" not in gpu2[0]
        assert [dict(labels) for labels in parsed["DCGM_FI_DEV_GPU_TEMP"] if dict(labels)["gpu"] == "3"][0].get(
            "pod"
        ) is None
    finally:
        exporter.stop()


def test_the_first_answer_counts_even_before_the_gpus_are_known(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet
) -> None:
    """The kubelet's first answer arrives before the first cycle has enumerated the GPUs; its device
    ids are resolved when joined, not dropped until the next refresh (default 10 s)."""
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "200ms", "--kubernetes",
        "--kubernetes.pod-resources-socket", kubelet.socket_path,
    )  # fmt: skip
    try:
        # Each GPU joins the answer at its own read, so one snapshot may show one pod and not yet the
        # other; both must come from the first answer, long before the 10 s refresh.
        wait_for(
            exporter,
            lambda p: (
                value(p, "gpu_allocation_info", pod="viz-1") == 1
                and value(p, "gpu_allocation_info", gpu="0", pod="trainer-0") == 1
            ),
            timeout=5,
        )
        assert kubelet.calls == 1
    finally:
        exporter.stop()


def test_process_series_carry_the_pod_the_kubelet_names(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A process whose cgroups give a pod UID and container id gets namespace, pod and container from the
    kubelet's /pods (a real HTTPS server checking the bearer token and verified against its CA)."""
    from tests.process.test_processes import procfs
    from tests.system.test_kubeletpods import ID1, UID_A
    from tests.system.test_kubeletpods import Kubelet as PodsApi
    from tests.webtls import make_certs

    certs = make_certs(tmp_path_factory.mktemp("certs"))
    api = PodsApi(certs)
    api.start()
    token = tmp_path / "token"
    token.write_text(api.token)
    root = procfs(tmp_path / "proc")
    (root / "5151" / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        + UID_A.replace("-", "_") + f".slice/cri-containerd-{ID1}.scope\n"
    )  # fmt: skip
    scenario = tmp_path / "host.scn"
    scenario.write_text(
        (SCENARIOS / "h100x4.scn").read_text() + "gpu1.process.0.pid = 5151\ngpu1.process.0.used_memory = 1024\n"
    )
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--path.procfs", str(root), *_flags(kubelet),
        "--kubernetes.kubelet-url", api.url, "--kubernetes.kubelet-token-file", str(token),
        "--kubernetes.kubelet-ca-file", str(certs.path("ca.crt")),
    )  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: value(p, "gpu_process_memory_used_bytes", pod="trainer-0") == 1024)
        labels = dict(next(k for k in parsed["gpu_process_memory_used_bytes"] if dict(k)["pid"] == "5151"))
        assert (labels["namespace"], labels["pod"], labels["container"], labels["pod_uid"]) == (
            "ml",
            "trainer-0",
            "main",
            UID_A,
        )
        assert value(parsed, "gpu_exporter_source_up", source="kubelet_pods") == 1
        assert all(header == f"Bearer {api.token}" for _path, header in api.requests)
    finally:
        exporter.stop()
        api.stop()
