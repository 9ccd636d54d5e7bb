"""Dynamic Resource Allocation out of process: the real exporter asks a real gRPC pod-resources
server (tests/podresources_server.py, extended with dynamic resources) for claims and an HTTPS
Kubernetes API stand-in (tests/kubeapi_server.py) for this node's ResourceSlices and pods, and
joins them onto its GPUs: DRA-only and mixed with the device plugin, every GPU reported, MIG
devices appearing and replaced at run time (listed and watched), watches that expire or break, an
API server that fails and returns, a token file that rotates, pod names for the processes of a
shared GPU, dcgm-exporter's uid and pod labels."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.attribution.proto.podresources_v1_pb2 import ClaimResource, DynamicResource, PodResources
from tests.harness import REPO, SCENARIOS, Exporter, start, value
from tests.kubeapi_server import NODE, KubeApi, api_pod, gpu_device, mig_device, resource_slice
from tests.podresources_server import FakeKubelet, pod
from tests.process.test_faults import rewrite, wait_for
from tests.webtls import Certs, make_certs

GPUS = [f"GPU-4a1e0c2d-{n}b7f-4c3a-9e21-5d8f6a0b1c{n}{n}" for n in range(4)]  # tests/scenarios/h100x4.scn
MIG_GPU = "GPU-7d3f9a21-6c4e-4b8a-91f2-0e5d3c7b9a14"  # tests/scenarios/mig.scn
MIG_5 = "MIG-6b2c3d4e-5f6a-5b7c-9d8e-0f1a2b3c4d5e"  # GPU instance 5, 2g.10gb
MIG_13 = "MIG-7c3d4e5f-6a7b-5c8d-ae9f-1a2b3c4d5e6f"  # GPU instance 13, 1g.5gb
UID_TRAIN = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
UID_NB_A = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538"
UID_NB_B = "3d6a4adc-4ac3-33f4-aa5f-2238f5eec649"
ID_A, ID_B = "a1" * 32, "b2" * 32
COUNTERS = str(REPO / "tests" / "fixtures" / "default-counters.csv")


def dra_pod(namespace: str, name: str, container: str, claim: str, *devices: str) -> PodResources:
    """A pod whose container uses ResourceClaim ``claim`` with ``devices`` of NVIDIA's driver in this node's pool."""
    made = pod(namespace, name, (container, []))
    made.containers[0].dynamic_resources.append(
        DynamicResource(
            claim_name=claim,
            claim_namespace=namespace,
            claim_resources=[
                ClaimResource(driver_name="gpu.nvidia.com", pool_name=NODE, device_name=d) for d in devices
            ],
        )
    )
    return made


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    server = FakeKubelet(str(tmp_path / "kubelet.sock"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def api(certs: Certs) -> Iterator[KubeApi]:
    server = KubeApi(certs)
    server.slices = [resource_slice("node-gpus", [gpu_device(f"gpu-{n}", uuid, n) for n, uuid in enumerate(GPUS)])]
    server.slices.append(resource_slice("other-node", [gpu_device("gpu-1", "GPU-elsewhere", 1)], node="gpu-node-2"))
    server.pods = [
        api_pod("ml", "trainer-0", UID_TRAIN, {}, labels={"app": "trainer", "team.example.com/owner": "vision"}),
        api_pod("team-a", "nb-a", UID_NB_A, {ID_A: "lab"}),
        api_pod("team-b", "nb-b", UID_NB_B, {ID_B: "lab"}),
    ]
    server.start()
    yield server
    server.stop()


def _start(fakenvml_dir: Path, scenario: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi,
           *flags: str, env: dict[str, str] | None = None) -> Exporter:  # fmt: skip
    token = tmp_path / "token"
    if not token.exists():
        token.write_text(api.token)
    return start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--kubernetes",
        "--kubernetes.pod-resources-socket", kubelet.socket_path, "--kubernetes.refresh-interval", "1s",
        "--kubernetes.kubelet-url", "", "--kubernetes.api-url", api.url, "--kubernetes.node-name", NODE,
        "--kubernetes.kubelet-token-file", str(token), "--kubernetes.kubelet-ca-file", str(api.certs.path("ca.crt")),
        *flags, env=env,
    )  # fmt: skip


def test_dra_and_device_plugin_on_one_node(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    kubelet.set_pods(
        dra_pod("ml", "trainer-0", "main", "trainer-0-gpu", "gpu-1", "gpu-2"),
        pod("web", "infer", ("server", [("nvidia.com/gpu", [GPUS[0]])])),
        dra_pod("ml", "ghost", "main", "ghost-gpu", "gpu-9"),  # no slice publishes it: not attributed
    )
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)
    try:
        # Each GPU joins the sources' answers at its own read: wait until GPUs 0, 1 and 2 all have.
        parsed = wait_for(
            exporter,
            lambda p: all(value(p, "gpu_allocation_info", gpu=gpu, pod=name) == 1
                          for gpu, name in (("0", "infer"), ("1", "trainer-0"), ("2", "trainer-0"))),
        )  # fmt: skip
        dra = {"namespace": "ml", "pod": "trainer-0", "container": "main", "claim": "trainer-0-gpu",
               "claim_namespace": "ml"}  # fmt: skip
        assert value(parsed, "gpu_allocation_info", gpu="1", uuid=GPUS[1], **dra) == 1
        assert value(parsed, "gpu_allocation_info", gpu="2", uuid=GPUS[2], **dra) == 1
        plugin = [dict(k) for k in parsed["gpu_allocation_info"] if dict(k)["pod"] == "infer"]
        assert plugin == [{"gpu": "0", "uuid": GPUS[0], "namespace": "web", "pod": "infer", "container": "server"}]
        assert len(parsed["gpu_allocation_info"]) == 3  # ghost's device is published by no slice of this node
        assert value(parsed, "gpu_allocation_idle_seconds_total", gpu="1", claim="trainer-0-gpu") is not None
        for gpu in "0123":  # every GPU, allocated or not
            assert value(parsed, "gpu_power_watts", gpu=gpu) is not None
        assert value(parsed, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 1
        assert value(parsed, "gpu_exporter_source_up", source="kubernetes_pods") == 1
        assert value(parsed, "gpu_exporter_source_up", source="kubelet") == 1
        assert all(q.split("?")[1].count("spec.nodeName%3Dgpu-node-1") == 1 for q, _ in api.requests)
        calls, began = len(api.requests), time.monotonic()
        for _ in range(20):  # scrapes never reach the API server
            exporter.metrics()
        assert len(api.requests) - calls <= 4 * ((time.monotonic() - began) / 3.0 + 1)  # a list and a watch each
        assert "kubernetes resourceslices: " + api.url + " answers (resource.k8s.io/v1, 4 DRA devices" in exporter.log()
    finally:
        exporter.stop()


def test_mig_devices_created_and_replaced_at_run_time(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    api.versions = ("v1beta1",)  # a 1.32 cluster: devices under "basic"
    api.slices = [resource_slice("gpus", [gpu_device("gpu-0", MIG_GPU, 0, basic=True)])]
    kubelet.set_pods(
        dra_pod("ml", "small", "main", "small-mig", "gpu-0-mig-9-4-1"),
        dra_pod("ml", "tiny", "main", "tiny-mig", "gpu-0-mig-dyn-19"),  # dynamic MIG: made for its claim
        dra_pod("ml", "huge", "main", "huge-mig", "gpu-0-mig-dyn-0"),  # a profile no instance has: no guess
    )
    exporter = _start(fakenvml_dir, SCENARIOS / "mig.scn", tmp_path, kubelet, api)
    try:
        wait_for(exporter, lambda p: value(p, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 1)
        assert "gpu_allocation_info" not in wait_for(exporter, lambda p: True)  # not published yet: no guess
        # the DRA driver creates the MIG device and publishes it (a new pool generation)
        created = mig_device("gpu-0-mig-9-4-1", MIG_5, MIG_GPU, "2g.10gb")
        dynamic = [
            mig_device("gpu-0-mig-dyn-19", "", MIG_GPU, "1g.5gb"),
            mig_device("gpu-0-mig-dyn-0", "", MIG_GPU, "7g.40gb"),
        ]
        api.slices = [
            resource_slice("gpus", [gpu_device("gpu-0", MIG_GPU, 0, basic=True), created, *dynamic], generation=2)
        ]
        parsed = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", pod="small") == 1)
        assert value(parsed, "gpu_allocation_info", gpu_instance="5", profile="2g.10gb", claim="small-mig") == 1
        assert value(parsed, "gpu_allocation_info", gpu_instance="13", profile="1g.5gb", pod="tiny") == 1
        assert value(parsed, "gpu_allocation_info", pod="huge") is None
        # destroyed and made again on another instance: re-resolved on the next listing
        remade = mig_device("gpu-0-mig-9-4-1", MIG_13, MIG_GPU, "1g.5gb", qualified=True)
        api.slices = [resource_slice("gpus", [remade], generation=3), resource_slice("stale", [created], generation=2)]
        parsed = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", gpu_instance="13", pod="small") == 1)
        assert value(parsed, "gpu_allocation_info", pod="tiny") is None  # no longer published
        assert value(parsed, "gpu_allocation_info", gpu_instance="5") is None
    finally:
        exporter.stop()


def test_api_server_failing_and_returning_and_a_rotating_token(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    kubelet.set_pods(
        dra_pod("ml", "trainer-0", "main", "trainer-0-gpu", "gpu-1"),
        pod("web", "infer", ("server", [("nvidia.com/gpu", [GPUS[0]])])),
    )
    api.status = 403  # no RBAC grant yet
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)
    try:
        slices = {"source": "kubernetes_resourceslices"}
        wait_for(exporter, lambda p: value(p, "gpu_exporter_source_failures_total", kind="unauthorized", **slices) == 1)
        down = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", pod="infer") == 1)
        assert value(down, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 0
        assert value(down, "gpu_allocation_info", pod="trainer-0") is None  # device-plugin attribution goes on
        lines = [line for line in exporter.log().splitlines() if "kubernetes resourceslices:" in line]
        assert len(lines) == 1 and "failed (unauthorized: HTTP 403" in lines[0], lines
        api.status = 200
        back = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", pod="trainer-0") == 1)
        assert value(back, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 1
        assert f"kubernetes resourceslices: {api.url} answers (resource.k8s.io/v1, 4 DRA devices" in exporter.log()
        api.stop()  # the API server restarts: the last answer is kept meanwhile
        wait_for(exporter, lambda p: value(p, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 0)
        assert value(wait_for(exporter, lambda p: True), "gpu_allocation_info", pod="trainer-0") == 1
        api.start()
        # the projected token rotates: the old one is refused from now on, the file holds the new one
        api.token = "api-token-two"
        rewrite(tmp_path / "token", api.token)
        wait_for(exporter, lambda p: value(p, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 1)
        wait_for(exporter, lambda p: any(h == "Bearer api-token-two" for _q, h in api.requests))
        failures = dict(wait_for(exporter, lambda p: True)["gpu_exporter_source_failures_total"])
        assert not [labels for labels in failures if ("kind", "unauthorized") in labels and
                    ("source", "kubernetes_pods") in labels and failures[labels] > 1]  # fmt: skip
    finally:
        exporter.stop()


def test_processes_on_a_shared_gpu_named_from_the_api_server(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    """Two pods time-slice GPU 2: one series per process, each with its own pod (from its cgroups'
    pod UID and this node's pods in the API server), never one per logical slot."""
    from tests.process.test_processes import procfs

    kubelet.set_pods(
        dra_pod("team-a", "nb-a", "lab", "shared", "gpu-2"), dra_pod("team-b", "nb-b", "lab", "shared", "gpu-2")
    )
    root = procfs(tmp_path / "proc")
    for pid, uid, container in ((4242, UID_NB_A, ID_A), (5151, UID_NB_B, ID_B)):
        (root / str(pid) / "cgroup").write_text(f"0::/kubepods/besteffort/pod{uid}/{container}\n")
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "".join(
        f"gpu2.process.{n}.pid = {pid}\ngpu2.process.{n}.used_memory = {mib * 1048576}\n"
        for n, (pid, mib) in enumerate(((4242, 1024), (5151, 2048)))
    ))  # fmt: skip
    exporter = _start(fakenvml_dir, scenario, tmp_path, kubelet, api, "--path.procfs", str(root))
    try:
        # The pods list (process names) and the ResourceSlices (claims to GPUs) are two API sources,
        # each refreshed on its own: wait until both have answered.
        parsed = wait_for(
            exporter,
            lambda p: (
                value(p, "gpu_process_memory_used_bytes", pod="nb-b") is not None
                and value(p, "gpu_allocation_info", gpu="2", pod="nb-b", claim="shared") is not None
            ),
        )
        series = {dict(k)["pid"]: (dict(k)["namespace"], dict(k)["pod"], dict(k)["container"], v)
                  for k, v in parsed["gpu_process_memory_used_bytes"].items()}  # fmt: skip
        assert series == {
            "4242": ("team-a", "nb-a", "lab", 1024 * 1048576),
            "5151": ("team-b", "nb-b", "lab", 2048 * 1048576),
        }
        assert value(parsed, "gpu_allocation_info", gpu="2", pod="nb-a", claim="shared") == 1
        assert value(parsed, "gpu_allocation_info", gpu="2", pod="nb-b", claim="shared") == 1
    finally:
        exporter.stop()


def test_dcgm_exporter_pod_uid_and_pod_labels(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    kubelet.set_pods(dra_pod("ml", "trainer-0", "main", "trainer-0-gpu", "gpu-1"))
    exporter = _start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api, "-f", COUNTERS,
        "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex", "team.*",
    )  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: value(p, "DCGM_FI_DEV_GPU_TEMP", pod="trainer-0") is not None)
        labels = dict(next(k for k in parsed["DCGM_FI_DEV_GPU_TEMP"] if dict(k)["gpu"] == "1"))
        assert (labels["namespace"], labels["container"], labels["team_example_com_owner"]) == ("ml", "main", "vision")
        assert "app" not in labels and "pod_uid" not in labels
        assert "--kubernetes-enable-pod-labels:" not in exporter.log()  # a real flag now, not a warning
    finally:
        exporter.stop()
    exporter = _start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api, "-f", COUNTERS,
        env={"DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true"},
    )  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: value(p, "DCGM_FI_DEV_GPU_TEMP", pod_uid=UID_TRAIN) is not None)
        assert value(parsed, "DCGM_FI_DEV_GPU_TEMP", gpu="1", pod="trainer-0", pod_uid=UID_TRAIN) is not None
        assert [dict(k).get("pod_uid") for k in parsed["DCGM_FI_DEV_GPU_TEMP"] if dict(k)["gpu"] == "0"] == [None]
    finally:
        exporter.stop()


def _lists(api: KubeApi) -> int:
    return sum("watch=" not in query for query, _ in api.requests)


def _watching(exporter: Exporter, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi) -> Exporter:
    """An exporter listing every 30 s (kubelet refresh 10 s), once both API sources watch."""
    api.slices = [resource_slice("gpus", [gpu_device("gpu-0", MIG_GPU, 0)])]
    kubelet.set_pods(dra_pod("ml", "small", "main", "small-mig", "gpu-0-mig-9-4-1"))
    started = _start(exporter, SCENARIOS / "mig.scn", tmp_path, kubelet, api, "--kubernetes.refresh-interval", "10s")
    wait_for(started, lambda p: value(p, "gpu_exporter_source_up", source="kubernetes_resourceslices") == 1)
    wait_for(started, lambda p: api.watches() == 2)
    return started


def test_a_mig_device_published_in_a_watch_event_is_attributed_at_once(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    exporter = _watching(fakenvml_dir, tmp_path, kubelet, api)
    try:
        lists, began = _lists(api), time.monotonic()
        created = mig_device("gpu-0-mig-9-4-1", MIG_5, MIG_GPU, "2g.10gb")
        api.publish("MODIFIED", resource_slice("gpus", [gpu_device("gpu-0", MIG_GPU, 0), created], generation=2))
        parsed = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", pod="small") == 1, timeout=5.0)
        assert time.monotonic() - began < 5.0  # the next list is 30 s away
        assert value(parsed, "gpu_allocation_info", gpu_instance="5", claim="small-mig") == 1
        assert _lists(api) == lists
        api.publish("DELETED", resource_slice("gpus", []))
        wait_for(exporter, lambda p: value(p, "gpu_allocation_info", pod="small") is None, timeout=5.0)
        assert _lists(api) == lists
    finally:
        exporter.stop()


def test_a_watch_gone_or_broken_off_leads_to_a_fresh_list(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    exporter = _watching(fakenvml_dir, tmp_path, kubelet, api)
    try:
        lists = _lists(api)
        created = mig_device("gpu-0-mig-9-4-1", MIG_5, MIG_GPU, "2g.10gb")
        api.slices = [resource_slice("gpus", [created], generation=2)]  # changed without an event
        api.expire()  # 410 Gone: only a fresh list shows the change
        wait_for(exporter, lambda p: value(p, "gpu_allocation_info", gpu_instance="5", pod="small") == 1, timeout=5.0)
        assert _lists(api) >= lists + 2  # both sources listed again
        wait_for(exporter, lambda p: api.watches() == 2)
        api.drop_watches()  # the stream breaks off: counted, logged once, listed and watched again
        slices = {"source": "kubernetes_resourceslices"}
        wait_for(exporter, lambda p: (value(p, "gpu_exporter_source_failures_total", kind="unavailable", **slices) or 0)
                 >= 1 and api.watches() == 2, timeout=5.0)  # fmt: skip
        remade = mig_device("gpu-0-mig-9-4-1", MIG_13, MIG_GPU, "1g.5gb")
        api.publish("MODIFIED", resource_slice("gpus", [remade], generation=3))
        parsed = wait_for(exporter, lambda p: value(p, "gpu_allocation_info", gpu_instance="13") == 1, timeout=5.0)
        assert value(parsed, "gpu_exporter_source_up", **slices) == 1
        lines = [line for line in exporter.log().splitlines() if "kubernetes resourceslices: watching" in line]
        assert len(lines) == 1 and "failed (unavailable: the watch stream broke" in lines[0], lines
    finally:
        exporter.stop()
