"""Kubernetes API bounds of issue 40, against the real exporter: objects a watch adds are capped as a
list is (20,000), a watch our own deadline ends in the middle of an event is not an error, and a
pod's labels copied onto its GPU's series (dcgm-exporter mode) are bounded."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.harness import SCENARIOS, value
from tests.kubeapi_server import NODE, KubeApi, api_pod
from tests.podresources_server import FakeKubelet
from tests.process.test_faults import wait_for
from tests.system.test_dra import COUNTERS, UID_TRAIN, _start, api, certs, dra_pod, kubelet
from tests.system.test_kubeapi_hostile import _chunk, _failures, _stream_head, _until

__all__ = ["api", "certs", "kubelet"]  # fixtures shared with tests/system/test_dra.py


def test_objects_added_by_a_watch_are_capped_like_a_list(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    """20,500 ADDED pods in one watch: past 20,000 the watch ends as too_large (a list that long fails
    the same way), instead of holding every pod until the next list."""
    sent: list[int] = []

    def flood(handler: BaseHTTPRequestHandler, query: dict[str, str]) -> bool:
        if query.get("watch") != "1" or not handler.path.startswith("/api/v1/pods") or sent:
            return False
        _stream_head(handler)
        count = 0
        try:
            for n in range(20500):
                pod = api_pod("flood", f"p{n}", f"uid-{n}", {}, node=NODE)
                pod["metadata"]["resourceVersion"] = str(200 + n)
                _chunk(handler, json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n")
                count += 1
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        sent.append(count)
        return True

    api.hostile = flood
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)
    try:
        _until(lambda: _failures(exporter, "too_large") >= 1, "the watch counted as too_large", seconds=60)
        assert "more than 20000 objects after the watch's additions" in exporter.log()
    finally:
        exporter.stop()


def test_a_watch_cut_by_our_deadline_mid_event_is_no_error(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    """A server that ignores timeoutSeconds and is in the middle of an event when our deadline comes:
    the watch ends, a list follows, and nothing is counted as malformed."""
    stop = threading.Event()

    def slow(handler: BaseHTTPRequestHandler, query: dict[str, str]) -> bool:
        if query.get("watch") != "1":
            return False
        _stream_head(handler)
        try:
            _chunk(handler, b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"100"')
            while not stop.wait(0.2):  # the event goes on, a space at a time, past every deadline
                _chunk(handler, b" ")
        except OSError:
            pass
        return True

    api.hostile = slow
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api)  # watches for 3 s
    try:

        def pod_lists() -> int:
            return sum(1 for path, _ in list(api.requests) if path.startswith("/api/v1/pods") and "watch=" not in path)

        _until(lambda: pod_lists() >= 2, "a list after the watch's deadline", seconds=30)
        assert _failures(exporter, "malformed") == 0
    finally:
        stop.set()
        exporter.stop()


def test_a_pods_labels_copied_per_gpu_are_bounded(
    fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet, api: KubeApi
) -> None:
    """A tenant's pod with 3,000 labels, in dcgm-exporter mode with --kubernetes-enable-pod-labels:
    its GPU's series carry 32 of them, not 3,000 each (which took /metrics from 31 KB to 9.3 MB), and
    a warning counts the rest."""
    many = {f"tenant.example/key-{n:04d}": f"value-{n}" for n in range(3000)}
    api.pods = [api_pod("ml", "trainer-0", UID_TRAIN, {}, labels=many)]
    kubelet.set_pods(dra_pod("ml", "trainer-0", "main", "trainer-0-gpu", "gpu-1"))
    exporter = _start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, kubelet, api, "-f", COUNTERS,
                      "--kubernetes-enable-pod-labels")  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: value(p, "DCGM_FI_DEV_GPU_TEMP", pod="trainer-0") is not None)
        mine = next(dict(labels) for labels in parsed["DCGM_FI_DEV_GPU_TEMP"] if dict(labels).get("pod") == "trainer-0")
        copied = [name for name in mine if name.startswith("tenant_example_key_")]
        assert len(copied) == 32, len(copied)
        assert len(exporter.metrics()) < 400_000
        assert "2968 Kubernetes label(s) beyond the first 32 or 4096 bytes not copied" in exporter.log()
    finally:
        exporter.stop()
