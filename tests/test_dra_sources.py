"""The DRA sources in process: the pod-resources answer's dynamic resources (a real gRPC server),
ResourceSlice parsing (v1 and v1beta1 shapes, qualified attribute names, pool generations, refusals)
and the API server source's failure kinds and paging (the HTTPS stand-in of tests/kubeapi_server.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.attribution.kubeapi import ApiClient, NodePods, ResourceSlices
from gpu_exporter.attribution.podresources import Allocation, PodResources
from gpu_exporter.attribution.proto.podresources_v1_pb2 import ClaimResource, DynamicResource
from gpu_exporter.attribution.refresh import Failure
from gpu_exporter.attribution.resourceslices import DraDevice, parse
from tests.kubeapi_server import NODE, KubeApi, api_pod, gpu_device, mig_device, resource_slice
from tests.podresources_server import FakeKubelet, pod
from tests.webtls import Certs, make_certs

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


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def api(certs: Certs) -> Iterator[KubeApi]:
    server = KubeApi(certs)
    server.start()
    yield server
    server.stop()


def _client(api: KubeApi, tmp_path: Path, ca: str = "") -> ApiClient:
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    return ApiClient(api.url, str(token), ca or str(api.certs.path("ca.crt")), 2.0)


def test_pods_of_this_node_are_listed_page_by_page(api: KubeApi, tmp_path: Path) -> None:
    api.pods = [api_pod("ns", f"p{n}", f"uid-{n}", {f"{n:064x}": "c"}) for n in range(1203)]
    api.pods.append(api_pod("ns", "elsewhere", "uid-x", {}, node="gpu-node-2"))
    source = NodePods(_client(api, tmp_path), NODE, 30.0, 60.0)
    source.refresh()
    state = source.current()
    assert (state.up, len(state.pods), state.pods["uid-1202"].containers) == (True, 1203, {f"{1202:064x}": "c"})
    assert [query.count("continue=") for query, _ in api.requests] == [0, 1, 1]  # three pages of 500


def test_no_dra_api_wrong_ca_and_no_token_are_told_apart(api: KubeApi, tmp_path: Path, certs: Certs) -> None:
    api.versions = ()  # a cluster without resource.k8s.io
    slices = ResourceSlices(_client(api, tmp_path), NODE, DRIVERS, 30.0, 60.0)
    slices.refresh()
    assert (slices.current().error, slices.current().calls) == ("not_found", 1)
    assert [path for path in api.paths()] == [
        f"/apis/resource.k8s.io/{v}/resourceslices" for v in ("v1", "v1beta2", "v1beta1")
    ]
    other = make_certs(tmp_path / "other")
    wrong = ResourceSlices(_client(api, tmp_path, str(other.path("ca.crt"))), NODE, DRIVERS, 30.0, 60.0)
    wrong.refresh()
    assert wrong.current().error == "tls"
    missing = ApiClient(api.url, str(tmp_path / "absent"), str(certs.path("ca.crt")), 2.0)
    nothing = NodePods(missing, NODE, 30.0, 60.0)
    nothing.refresh()
    assert (nothing.current().error, nothing.current().up) == ("token", False)
    assert all(header != "Bearer " for _query, header in api.requests)


def test_pods_are_watched_after_the_list(api: KubeApi, tmp_path: Path) -> None:
    api.pods = [api_pod("ns", "first", "uid-1", {})]
    source = NodePods(_client(api, tmp_path), NODE, 30.0, 60.0)
    source.start()
    try:
        wait_for(lambda: api.watches() == 1)
        assert "uid-1" in source.current().pods
        api.publish("ADDED", api_pod("ns", "second", "uid-2", {"c" * 64: "main"}), plural="pods")
        wait_for(lambda: "uid-2" in source.current().pods, timeout=2.0)
        api.publish("DELETED", api_pod("ns", "first", "uid-1", {}), plural="pods")
        wait_for(lambda: "uid-1" not in source.current().pods, timeout=2.0)
        assert sum("watch=" not in query for query, _ in api.requests) == 1  # one list, the rest watched
        watch = next(query for query, _ in api.requests if "watch=" in query)
        assert "allowWatchBookmarks=true" in watch and "resourceVersion=100" in watch and "timeoutSeconds=30" in watch
    finally:
        began = time.monotonic()
        source.stop()
    assert time.monotonic() - began < 1.0  # stop ends the watch in progress (else it waits up to 6 s)
