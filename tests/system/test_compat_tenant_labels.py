"""dcgm-exporter mode with ``--kubernetes-enable-pod-labels``, out of process: a tenant's pod labels
named like the labels that say which GPU a series is (``UUID``, ``gpu``, ``Hostname``, ...) or like
Prometheus' target labels (``instance``, ``job``) never replace or add them; other labels still come
through."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.harness import SCENARIOS, value
from tests.kubeapi_server import KubeApi, api_pod
from tests.podresources_server import FakeKubelet
from tests.process.test_faults import wait_for
from tests.system.test_dra import COUNTERS, GPUS, UID_TRAIN, _start, api, certs, dra_pod, kubelet

__all__ = ["api", "certs", "kubelet"]  # fixtures shared with tests/system/test_dra.py

IMPERSONATION = {
    "UUID": GPUS[3], "uuid": GPUS[3], "gpu": "3", "Hostname": "other-node", "modelName": "NVIDIA-B200",
    "pci_bus_id": "00000000:DB:00.0", "device": "nvidia3", "instance": "10.0.0.9:9400", "job": "billing",
    "err_code": "79", "__name__": "x", "exported_instance": "y", "app": "trainer",
}  # fmt: skip


def test_pod_labels_never_replace_identity_or_target_labels(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    api.pods = [api_pod("ml", "trainer-0", UID_TRAIN, {}, labels=IMPERSONATION)]
    kubelet.set_pods(dra_pod("ml", "trainer-0", "main", "trainer-0-gpu", "gpu-1"))
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api, "-f", COUNTERS,
                      "--kubernetes-enable-pod-labels")  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: value(p, "DCGM_FI_DEV_GPU_TEMP", pod="trainer-0") is not None)
        for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"):
            series = [dict(labels) for labels in parsed[name]]
            assert sorted(s["UUID"] for s in series) == sorted(GPUS), series  # one series per GPU, each its own
            mine = next(s for s in series if s.get("pod") == "trainer-0")
            assert (mine["UUID"], mine["gpu"], mine["device"]) == (GPUS[1], "1", "nvidia1"), mine
            assert mine["Hostname"] == socket.gethostname() and mine["modelName"] != "NVIDIA-B200", mine
            assert mine["pci_bus_id"] != "00000000:DB:00.0", mine
            assert not {"instance", "job", "uuid", "err_code", "exported_instance"} & set(mine), mine
            assert mine["app"] == "trainer"  # a tenant's own label still comes through
    finally:
        exporter.stop()
