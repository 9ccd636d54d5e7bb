"""The DRA sources in process: the pod-resources answer's dynamic resources (a real gRPC server),
ResourceSlice parsing (v1 and v1beta1 shapes, qualified attribute names, pool generations, refusals)
and the API server source's failure kinds and paging (the HTTPS stand-in of tests/kubeapi_server.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.attribution.kubeapi import ApiClient
from gpu_exporter.attribution.podresources import Allocation, PodResources
from gpu_exporter.attribution.proto.podresources_v1_pb2 import ClaimResource, DynamicResource
from gpu_exporter.attribution.refresh import Failure
from gpu_exporter.attribution.resourceslices import DraDevice, parse
from tests.kubeapi_server import NODE, KubeApi, gpu_device, mig_device, resource_slice
from tests.podresources_server import FakeKubelet, pod

DRIVERS = frozenset({"gpu.nvidia.com"})
GPU = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
MIG = "MIG-11111111-2222-3333-4444-555555555555"


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_dynamic_resources_of_nvidias_driver_are_read(tmp_path: Path) -> None:
    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"))
    made = pod("ml", "train", ("main", [("nvidia.com/gpu", [GPU])]), ("side", []))
    made.containers[0].dynamic_resources.append(
        DynamicResource(
            claim_name="train-gpus", claim_namespace="ml",
            claim_resources=[
                ClaimResource(driver_name="gpu.nvidia.com", pool_name=NODE, device_name="gpu-0-mig-9-4-1"),
                ClaimResource(driver_name="nic.example.com", pool_name=NODE, device_name="nic-0"),  # not a GPU
                ClaimResource(driver_name="gpu.nvidia.com", pool_name=NODE, device_name=""),  # kubelet < 1.32
            ],
        )
    )  # fmt: skip
    kubelet.set_pods(made)
    kubelet.start()
    try:
        source = PodResources(kubelet.socket_path, 30.0, gpus=lambda: ((0, GPU, ()),))
        source.refresh()
        assert source.current().allocations == (
            Allocation("ml", "train", "main", "gpu.nvidia.com", "gpu-0-mig-9-4-1", "", "", "train-gpus", "ml",
                       "gpu.nvidia.com", NODE),
            Allocation("ml", "train", "main", "nvidia.com/gpu", GPU, GPU, ""),
        )  # fmt: skip
    finally:
        kubelet.stop()


def test_resource_slices_in_every_shape() -> None:
    items: list[dict[str, Any]] = [
        resource_slice("a", [gpu_device("gpu-0", GPU, 0, basic=True), mig_device("gpu-0-mig-1", MIG, GPU, "1g.10gb")]),
        resource_slice("b", [mig_device("gpu-1-mig-1", "MIG-q", "GPU-q", "2g.20gb", qualified=True)], pool="p2"),
        resource_slice("c", [gpu_device("gpu-9", "GPU-old", 9)], pool="p2", generation=0),  # an older generation
        resource_slice("d", [gpu_device("gpu-0", "GPU-nic", 0)], driver="nic.example.com"),  # another driver
        resource_slice("e", [{"name": "gpu-5", "attributes": {"other.example.com/uuid": {"string": "GPU-x"}}}]),
        resource_slice("f", [{"name": "gpu-6", "attributes": {"index": {"int": 6}}}]),  # no uuid: skipped
        resource_slice("h", [mig_device("gpu-0-mig-14-0-1", "", GPU, "1g.5gb")], pool="p3"),  # dynamic MIG
        resource_slice("g", []),
    ]
    assert dict(parse(items, DRIVERS)) == {
        ("gpu.nvidia.com", NODE, "gpu-0"): DraDevice(GPU),
        ("gpu.nvidia.com", NODE, "gpu-0-mig-1"): DraDevice(GPU, MIG, "1g.10gb"),
        ("gpu.nvidia.com", "p2", "gpu-1-mig-1"): DraDevice("GPU-q", "MIG-q", "2g.20gb"),
        ("gpu.nvidia.com", "p3", "gpu-0-mig-14-0-1"): DraDevice(GPU, "", "1g.5gb"),
    }


@pytest.mark.parametrize(
    "item",
    [
        "not an object",
        {"spec": None},
        {"spec": {"driver": "gpu.nvidia.com"}},  # no pool
        {"spec": {"driver": "gpu.nvidia.com", "pool": {"name": ""}}},
        {"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": "1"}}},
        {"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p"}, "devices": {}}},
        {"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p"},
                  "devices": [{"attributes": {"uuid": {"string": "G"}}}]}},
        {"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p"}, "devices": [{"name": "d", "attributes": []}]}},
        {"spec": {"driver": "x" * 2000, "pool": {"name": "p"}}},
    ],
)  # fmt: skip
def test_what_is_not_a_resource_slice_is_refused(item: object) -> None:
    with pytest.raises(Failure) as raised:
        parse([item], DRIVERS)
    assert raised.value.kind == "malformed"


def _client(api: KubeApi, tmp_path: Path, ca: str = "") -> ApiClient:
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    return ApiClient(api.url, str(token), ca or str(api.certs.path("ca.crt")), 2.0)
