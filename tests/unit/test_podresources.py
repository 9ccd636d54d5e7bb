"""The kubelet pod-resources source against a real gRPC server on a unix socket (tests/podresources_server.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_exporter.attribution import deviceids
from gpu_exporter.attribution.deviceids import GpuIds, resolve
from gpu_exporter.attribution.podresources import Allocation, PodResources, PodResourcesState
from tests.podresources_server import FakeKubelet, pod

GPU0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
GPU1 = "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"
MIG_A = "MIG-11111111-2222-3333-4444-555555555555"
MIG_B = "MIG-66666666-7777-8888-9999-000000000000"
OLD_MIG = f"MIG-{GPU1}/2/0"
# GPU 0 whole; GPU 1 split: GPU instances 1 and 2 (one compute instance each), in NVML MIG index order.
GPUS: tuple[GpuIds, ...] = ((0, GPU0, ()), (1, GPU1, ((1, 0, MIG_A), (2, 0, MIG_B))))

REFRESH = 0.1


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    server = FakeKubelet(str(tmp_path / "kubelet.sock"))
    server.start()
    yield server
    server.stop()


def source(path: str, **kwargs: object) -> PodResources:
    kwargs.setdefault("max_age_seconds", 60.0)
    return PodResources(path, REFRESH, gpus=lambda: GPUS, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def started() -> Iterator[Callable[..., PodResources]]:
    made: list[PodResources] = []

    def make(path: str, **kwargs: object) -> PodResources:
        made.append(source(path, **kwargs))
        made[-1].start()
        return made[-1]

    yield make
    for each in made:
        each.stop()


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (GPU0, (GPU0, "")),
        (GPU0.lower(), (GPU0, "")),  # any case
        (f"{GPU0}::3", (GPU0, "")),  # time-slicing replica
        (MIG_B, (GPU1, MIG_B)),
        (f"{MIG_A}::1", (GPU1, MIG_A)),
        (OLD_MIG, (GPU1, MIG_B)),  # MIG UUID of drivers before R470
        (f"MIG-{GPU1}/7/0", (GPU1, "")),  # old form, instance not known
        ("nvidia0", (GPU0, "")),  # GKE
        ("nvidia1/gi2", (GPU1, MIG_B)),
        ("nvidia1/gi5", (GPU1, "")),
        ("1", (GPU1, "")),  # --device-id-strategy=index
        ("1:0", (GPU1, MIG_A)),
        ("1:9", (GPU1, "")),
        ("nvidia7", ("", "")),
        ("7", ("", "")),
        ("GPU-00000000-0000-0000-0000-000000000000", ("", "")),
        ("MIG-00000000-0000-0000-0000-000000000000", ("", "")),
        ("", ("", "")),
        ("something-else", ("", "")),
    ],
)
def test_resolve_every_device_id_form(device_id: str, expected: tuple[str, str]) -> None:
    assert resolve(device_id, GPUS) == expected


def test_gke_instance_with_two_compute_instances_names_no_mig_device() -> None:
    gpus: tuple[GpuIds, ...] = ((0, GPU0, ((3, 0, MIG_A), (3, 1, MIG_B))),)
    assert resolve("nvidia0/gi3", gpus) == (GPU0, "")


def test_gpu_resources() -> None:
    assert deviceids.is_gpu_resource("nvidia.com/gpu")
    assert deviceids.is_gpu_resource("nvidia.com/gpu.shared")
    assert deviceids.is_gpu_resource("nvidia.com/mig-1g.10gb")
    assert not deviceids.is_gpu_resource("example.com/accel")
    assert deviceids.is_gpu_resource("example.com/accel", frozenset({"example.com/accel"}))
    assert not deviceids.is_gpu_resource("cpu")


def test_values_exact(kubelet: FakeKubelet, started: Callable[..., PodResources]) -> None:
    kubelet.set_pods(
        pod("ml", "train-0", ("trainer", [("nvidia.com/gpu", [GPU0]), ("example.com/nic", ["nic0"])])),
        pod("ml", "infer-1", ("server", [("nvidia.com/mig-3g.40gb", [MIG_B])]), ("sidecar", [])),
        pod("dev", "nb", ("jupyter", [("nvidia.com/gpu.shared", [f"{GPU0}::2"])])),
        pod("gke", "job", ("main", [("example.com/accel", ["nvidia1/gi1", "nvidia9"])])),
        pod("web", "frontend", ("nginx", [])),
    )
    pods = started(kubelet.socket_path, resources=frozenset({"example.com/accel"}))
    wait_for(lambda: pods.current().up)
    state = pods.current()
    assert state.allocations == (
        Allocation("dev", "nb", "jupyter", "nvidia.com/gpu.shared", f"{GPU0}::2", GPU0, ""),
        Allocation("gke", "job", "main", "example.com/accel", "nvidia1/gi1", GPU1, MIG_A),
        Allocation("gke", "job", "main", "example.com/accel", "nvidia9", "", ""),
        Allocation("ml", "infer-1", "server", "nvidia.com/mig-3g.40gb", MIG_B, GPU1, MIG_B),
        Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", GPU0, GPU0, ""),
    )
    assert (state.error, state.failures, state.kept) == ("", (), False)
    assert state.calls >= 1
    assert abs(state.fetched_at - time.time()) < 5


def test_kubelet_asked_at_most_once_per_refresh(kubelet: FakeKubelet, started: Callable[..., PodResources]) -> None:
    kubelet.set_pods(pod("ml", "train-0", ("trainer", [("nvidia.com/gpu", [GPU0])])))
    began = time.monotonic()
    pods = started(kubelet.socket_path)
    reads = 0
    while time.monotonic() - began < 0.6:
        assert pods.current().allocations in (
            (),
            (Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", GPU0, GPU0),),
        )
        reads += 1
    elapsed = time.monotonic() - began
    assert reads > 100
    assert 1 <= kubelet.calls <= elapsed / REFRESH + 1
    wait_for(lambda: pods.current().calls == kubelet.calls, timeout=1)


def test_kubelet_that_disappears_is_kept_for_max_age_then_dropped_and_found_again(
    kubelet: FakeKubelet, started: Callable[..., PodResources], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpu_exporter.attribution.podresources")
    expected = (Allocation("ml", "train-0", "trainer", "nvidia.com/gpu", GPU0, GPU0),)
    kubelet.set_pods(pod("ml", "train-0", ("trainer", [("nvidia.com/gpu", [GPU0])])))
    pods = started(kubelet.socket_path, max_age_seconds=0.6)
    wait_for(lambda: pods.current().up)
    answered = pods.current().fetched_at

    kubelet.stop()
    wait_for(lambda: not pods.current().up)
    down = pods.current()
    assert (down.allocations, down.kept, down.fetched_at) == (expected, True, answered)
    assert down.error in ("unavailable", "socket_missing")
    kind = down.error
    wait_for(lambda: pods.current().allocations == ())
    # logged by the first refresh after the answer is dropped
    wait_for(lambda: any(r.getMessage().startswith("pod-resources: dropped") for r in caplog.records))
    gone = pods.current()
    assert (gone.up, gone.kept, gone.error, gone.fetched_at) == (False, False, kind, answered)
    assert time.time() - answered >= 0.6
    failures = dict(gone.failures)
    assert set(failures) == {kind} and failures[kind] >= 3  # every refresh while down counted

    kubelet.start()
    wait_for(lambda: pods.current().up)
    back = pods.current()
    assert (back.allocations, back.kept, back.error) == (expected, False, "")
    assert back.fetched_at > answered
    assert dict(back.failures) == failures  # counts stay
    time.sleep(3 * REFRESH)  # answering on: no more lines
    lines = [r.getMessage() for r in caplog.records]
    sock = kubelet.socket_path
    assert lines[0] == f"pod-resources: the kubelet answers on {sock} (1 GPU allocations)"
    assert lines[1].startswith(f"pod-resources: List on {sock} failed ({kind}: ")
    assert lines[1].endswith("; keeping the last answer for up to 0.6 s")
    assert lines[2].startswith("pod-resources: dropped the last answer, ")
    assert lines[2].endswith(f" s old (still failing: {kind})")
    assert lines[3] == f"pod-resources: the kubelet answers again on {sock} (1 GPU allocations)"
    assert len(lines) == 4


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (b"\xff\xff\xff\xff", "malformed"),  # not protobuf
        (b"\x0a\x05\x0a\x03\xc3\x28\x41", "malformed"),  # a pod name that is not UTF-8
    ],
)
def test_malformed_answer_keeps_the_last_one(
    kubelet: FakeKubelet, started: Callable[..., PodResources], answer: bytes, kind: str
) -> None:
    kubelet.set_pods(pod("ml", "train-0", ("trainer", [("nvidia.com/gpu", [GPU0])])))
    pods = started(kubelet.socket_path)
    wait_for(lambda: pods.current().up)
    kubelet.answer = answer
    wait_for(lambda: not pods.current().up)
    state = pods.current()
    assert (state.error, state.kept, len(state.allocations)) == (kind, True, 1)


def test_over_long_name_is_refused(kubelet: FakeKubelet, started: Callable[..., PodResources]) -> None:
    kubelet.set_pods(pod("ml", "x" * 2000, ("trainer", [("nvidia.com/gpu", [GPU0])])))
    pods = started(kubelet.socket_path)
    wait_for(lambda: pods.current().calls >= 1)
    state = pods.current()
    assert (state.up, state.error, state.allocations) == (False, "malformed", ())


def test_answer_over_the_size_bound_is_refused(kubelet: FakeKubelet, started: Callable[..., PodResources]) -> None:
    ids = [f"{GPU0}::{n}" for n in range(200)]
    kubelet.set_pods(pod("ml", "train-0", ("trainer", [("nvidia.com/gpu", ids)])))
    pods = started(kubelet.socket_path, max_answer_bytes=4096)
    wait_for(lambda: pods.current().calls >= 1)
    assert (pods.current().up, pods.current().error) == (False, "too_large")


def test_slow_kubelet_times_out(kubelet: FakeKubelet, started: Callable[..., PodResources]) -> None:
    kubelet.delay = 0.5
    pods = started(kubelet.socket_path, timeout_seconds=0.05)
    wait_for(lambda: pods.current().error != "")
    assert (pods.current().up, pods.current().error) == (False, "timeout")


def test_missing_socket_and_not_a_socket(tmp_path: Path, started: Callable[..., PodResources]) -> None:
    missing = started(str(tmp_path / "absent.sock"))
    (tmp_path / "plain").write_text("not a socket")
    plain = started(str(tmp_path / "plain"))
    wait_for(lambda: missing.current().error != "" and plain.current().error != "")
    assert missing.current() == PodResourcesState(error="socket_missing", failures=(("socket_missing", 1),))
    assert (plain.current().error, plain.current().calls) == ("unavailable", 1)


def test_gpus_callable_that_fails_is_counted(kubelet: FakeKubelet) -> None:
    def broken() -> tuple[GpuIds, ...]:
        raise RuntimeError("no snapshot yet")

    pods = PodResources(kubelet.socket_path, REFRESH, gpus=broken)
    pods.refresh()
    assert (pods.current().up, pods.current().error) == (False, "error")


def test_stop_ends_the_thread_at_once(kubelet: FakeKubelet) -> None:
    pods = PodResources(kubelet.socket_path, 30.0)
    pods.start()
    wait_for(lambda: pods.current().up)
    began = time.monotonic()
    pods.stop()
    assert time.monotonic() - began < 1
