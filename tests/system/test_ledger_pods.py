"""The ledger on Kubernetes, out of process: two pods time-slice GPU 2 through one DRA claim (a real
gRPC pod-resources server and an HTTPS API stand-in naming the pods' UIDs, as in test_dra.py), their
processes at 60 % and 20 % SM of a GPU 90 % busy. The pods get the GPU's busy time 3:1, the rest is
unattributed, the parts add up to the GPU's busy time and energy, and each pod is given half the
GPU's time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import SCENARIOS, Labels, value
from tests.kubeapi_server import KubeApi
from tests.podresources_server import FakeKubelet
from tests.process.test_faults import wait_for
from tests.system.test_dra import (  # noqa: F401  (fixtures: pytest finds them by name)
    ID_A,
    ID_B,
    UID_NB_A,
    UID_NB_B,
    _start,
    api,
    certs,
    dra_pod,
    kubelet,
)

GPU2 = {"gpu": "2", "uuid": "GPU-4a1e0c2d-2b7f-4c3a-9e21-5d8f6a0b1c22"}
SHARES = ((4242, 1024, 60), (5151, 2048, 20))  # pid, MiB, SM %


def _get(parsed: dict[str, dict[Labels, float]], name: str, **labels: str) -> float:
    found = value(parsed, name, **labels)
    assert found is not None, (name, labels)
    return found


def test_two_pods_sharing_a_gpu_split_it_by_their_sm_shares(
    fakenvml_dir: Path,
    tmp_path: Path,
    kubelet: FakeKubelet,  # noqa: F811  (the fixture imported above)
    api: KubeApi,  # noqa: F811  (the fixture imported above)
) -> None:
    from tests.process.test_processes import procfs

    kubelet.set_pods(
        dra_pod("team-a", "nb-a", "lab", "shared", "gpu-2"), dra_pod("team-b", "nb-b", "lab", "shared", "gpu-2")
    )
    root = procfs(tmp_path / "proc")
    for pid, uid, container in ((4242, UID_NB_A, ID_A), (5151, UID_NB_B, ID_B)):
        (root / str(pid) / "cgroup").write_text(f"0::/kubepods/besteffort/pod{uid}/{container}\n")
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu2.utilization.gpu = 90\n" + "".join(
        f"gpu2.process.{n}.pid = {pid}\ngpu2.process.{n}.used_memory = {mib * 1048576}\n"
        f"gpu2.process.{n}.sm_util = {sm}\n"
        for n, (pid, mib, sm) in enumerate(SHARES)
    ))  # fmt: skip
    exporter = _start(fakenvml_dir, scenario, tmp_path, kubelet, api, "--path.procfs", str(root))
    try:
        first = wait_for(
            exporter, lambda p: (value(p, "gpu_allocation_busy_seconds_total", **GPU2, pod="nb-b") or 0) > 0
        )
        later = wait_for(
            exporter, lambda p: (value(p, "gpu_allocation_busy_seconds_total", **GPU2, pod="nb-b") or 0) > 1.0
        )
    finally:
        exporter.stop()
    a = _get(later, "gpu_allocation_busy_seconds_total", **GPU2, pod="nb-a", claim="shared")
    b = _get(later, "gpu_allocation_busy_seconds_total", **GPU2, pod="nb-b", claim="shared")
    rest = _get(later, "gpu_unattributed_busy_seconds_total", **GPU2)
    busy = _get(later, "gpu_utilization_seconds_total", **GPU2)
    assert a / b == pytest.approx(3.0, rel=0.01)
    assert a + b + rest == pytest.approx(busy, rel=0.01)
    assert _get(later, "gpu_allocation_memory_used_bytes", **GPU2, pod="nb-b") == 2048 * 1048576
    assert _get(later, "gpu_allocation_gpu_seconds_total", **GPU2, pod="nb-a") == pytest.approx(
        _get(later, "gpu_allocation_gpu_seconds_total", **GPU2, pod="nb-b")
    )
    totals = []
    for parsed in (first, later):
        parts = [_get(parsed, "gpu_allocation_energy_joules_total", **GPU2, pod=pod) for pod in ("nb-a", "nb-b")]
        totals.append(sum(parts) + _get(parsed, "gpu_unattributed_energy_joules_total", **GPU2))
    device = _get(later, "gpu_energy_joules_total", **GPU2) - _get(first, "gpu_energy_joules_total", **GPU2)
    assert totals[1] - totals[0] == pytest.approx(device, rel=0.01)
