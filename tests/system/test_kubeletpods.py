"""The kubelet ``/pods`` source against a real HTTPS server (http.server over ssl, certificates made
with the openssl command by tests/webtls.py) that checks the bearer token and serves a PodList."""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_exporter.attribution.kubeletpods import KubeletPods, PodName
from tests.webtls import Certs, issue, make_ca, make_certs

LOGGER = "gpu_exporter.attribution.kubeletpods"
REFRESH = 0.1
UID_A = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
UID_B = "11111111-2222-3333-4444-555555555555"
UID_C = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
ID1, ID2, ID3, ID4, ID5 = ("1" * 64, "ab" * 32, "c" * 64, "d" * 64, "e0" * 32)


def pod_list() -> dict[str, object]:
    """Three pods: containers on each runtime, an init and an ephemeral container, a container not
    started yet, a pending pod without status and ids that are no 64-hex container id."""
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": [
            {
                "metadata": {"uid": UID_A, "name": "trainer-0", "namespace": "ml", "labels": {"app": "t"}},
                "spec": {"containers": [{"name": "main"}, {"name": "sidecar"}]},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {"name": "main", "containerID": f"containerd://{ID1}", "ready": True},
                        {"name": "sidecar", "containerID": f"cri-o://{ID2.upper()}"},
                        {"name": "starting", "containerID": ""},
                        {"name": "waiting"},
                    ],
                    "initContainerStatuses": [{"name": "fetch", "containerID": f"docker://{ID3}"}],
                    "ephemeralContainerStatuses": [{"name": "debugger", "containerID": f"containerd://{ID4}"}],
                },
            },
            {
                "metadata": {"uid": UID_B.upper(), "name": "infer", "namespace": "serving"},
                "status": {
                    "containerStatuses": [
                        {"name": "server", "containerID": ID5},
                        {"name": "vm", "containerID": "kata://not-a-container-id"},
                    ]
                },
            },
            {"metadata": {"uid": UID_C, "name": "pending", "namespace": "default"}},
        ],
    }


EXPECTED = {
    UID_A: PodName("ml", "trainer-0", {ID1: "main", ID2: "sidecar", ID3: "fetch", ID4: "debugger"}),
    UID_B: PodName("serving", "infer", {ID5: "server"}),
    UID_C: PodName("default", "pending", {}),
}


class Kubelet:
    """An HTTPS server on 127.0.0.1 answering ``GET /pods`` to requests bearing ``token``."""

    def __init__(self, certs: Certs, cert: str = "server") -> None:
        self.certs = certs
        self.cert = cert
        self.token = "token-one"
        self.body = json.dumps(pod_list()).encode()
        self.length: int | None = None  # Content-Length to send; None: len(body); -1: none (close-delimited)
        self.status = 200
        self.delay = 0.0
        self.trickle = 0.0  # seconds between the body's bytes, sent one at a time
        self.requests: list[tuple[str, str]] = []  # (path, Authorization header)
        self.port = 0
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server calls
                kubelet.requests.append((self.path, self.headers.get("Authorization", "")))
                time.sleep(kubelet.delay)
                if self.headers.get("Authorization") != f"Bearer {kubelet.token}":
                    self.send_response(401)
                    self.send_header("Content-Length", "12")
                    self.end_headers()
                    self.wfile.write(b"Unauthorized")
                    return
                self.send_response(kubelet.status)
                self.send_header("Content-Type", "application/json")
                length = len(kubelet.body) if kubelet.length is None else kubelet.length
                if length >= 0:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                try:
                    if kubelet.trickle:
                        for index in range(len(kubelet.body)):
                            self.wfile.write(kubelet.body[index : index + 1])
                            time.sleep(kubelet.trickle)
                    else:
                        self.wfile.write(kubelet.body)
                except OSError:  # the client gave up
                    pass

            def log_message(self, format: str, *args: object) -> None:  # http.server's signature
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.certs.path(f"{self.cert}.crt")), str(self.certs.path(f"{self.cert}.key")))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/pods"


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    made = make_certs(tmp_path_factory.mktemp("kubelet-certs"))
    make_ca(made.directory, "wrong-ca")
    issue(made.directory, "node", "/CN=system:node:gpu-node-1", "DNS:gpu-node-1,IP:10.0.0.7")
    return made


@pytest.fixture
def kubelet(certs: Certs) -> Iterator[Kubelet]:
    server = Kubelet(certs)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("token-one\n")
    return path


@pytest.fixture
def started(kubelet: Kubelet, token_file: Path) -> Iterator[Callable[..., KubeletPods]]:
    made: list[KubeletPods] = []

    def make(**kwargs: object) -> KubeletPods:
        kwargs.setdefault("url", kubelet.url)
        kwargs.setdefault("token_file", str(token_file))
        kwargs.setdefault("ca_file", str(kubelet.certs.path("ca.crt")))
        kwargs.setdefault("refresh_seconds", REFRESH)
        kwargs.setdefault("timeout_seconds", 2.0)
        made.append(KubeletPods(**kwargs))  # type: ignore[arg-type]
        made[-1].start()
        return made[-1]

    yield make
    for each in made:
        each.stop()


def failures(source: KubeletPods) -> dict[str, int]:
    return dict(source.current().failures)


def test_values_exact(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    source = started()
    wait_for(lambda: source.current().up)
    state = source.current()
    assert dict(state.pods) == EXPECTED
    assert {uid: (p.namespace, p.pod, dict(p.containers)) for uid, p in state.pods.items()} == {
        uid: (p.namespace, p.pod, dict(p.containers)) for uid, p in EXPECTED.items()
    }
    assert state.error == "" and not state.kept and state.failures == ()
    assert abs(state.fetched_at - time.time()) < 5
    assert kubelet.requests[0] == ("/pods", "Bearer token-one")


def test_asked_at_most_once_per_refresh(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    began = time.monotonic()
    source = started(refresh_seconds=0.25)
    reads = 0
    while time.monotonic() - began < 1.0:
        source.current()
        reads += 1
    elapsed = time.monotonic() - began
    assert reads > 1000
    assert 1 <= len(kubelet.requests) <= 1 + int(elapsed / 0.25) + 1
    assert source.current().calls == len(kubelet.requests)


def test_wrong_ca_is_refused_and_counted(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    source = started(ca_file=str(kubelet.certs.path("wrong-ca.crt")))
    wait_for(lambda: failures(source).get("tls", 0) >= 2)
    state = source.current()
    assert not state.up and state.error == "tls" and state.pods == {}
    assert kubelet.requests == []  # the handshake failed: no request, so no token, reached the server


def test_certificate_for_another_address_is_refused(certs: Certs, token_file: Path) -> None:
    """A kubelet serving certificate names the node (hostname, node IPs), not 127.0.0.1."""
    kubelet = Kubelet(certs, cert="node")
    kubelet.start()
    try:
        source = KubeletPods(kubelet.url, str(token_file), str(certs.path("ca.crt")), timeout_seconds=2.0)
        source.refresh()
        state = source.current()
        assert state.error == "tls" and state.calls == 1 and kubelet.requests == []
    finally:
        kubelet.stop()


def test_missing_ca_and_missing_token_are_counted(
    kubelet: Kubelet, started: Callable[..., KubeletPods], tmp_path: Path
) -> None:
    no_ca = started(ca_file=str(tmp_path / "absent.crt"))
    not_a_ca = started(ca_file=str(kubelet.certs.path("server.ext")))
    no_token = started(token_file=str(tmp_path / "absent-token"))
    (tmp_path / "empty-token").write_text("\n")
    empty_token = started(token_file=str(tmp_path / "empty-token"))
    wait_for(lambda: "ca" in failures(no_ca) and "ca" in failures(not_a_ca))
    wait_for(lambda: "token" in failures(no_token) and "token" in failures(empty_token))
    assert all(s.current().calls == 0 for s in (no_ca, not_a_ca, no_token, empty_token))
    assert kubelet.requests == []


def test_insecure_skip_verify_accepts_any_certificate(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    source = started(ca_file=str(kubelet.certs.path("wrong-ca.crt")), insecure_skip_verify=True)
    wait_for(lambda: source.current().up)
    assert set(source.current().pods) == set(EXPECTED)


def test_unauthorized(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    kubelet.token = "another-token"
    source = started()
    wait_for(lambda: failures(source).get("unauthorized", 0) >= 2)
    assert source.current().error == "unauthorized" and not source.current().up
    assert kubelet.requests[0] == ("/pods", "Bearer token-one")


def test_other_status(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    kubelet.status = 500
    source = started()
    wait_for(lambda: "http" in failures(source))


def test_token_rotation_is_picked_up(
    kubelet: Kubelet, started: Callable[..., KubeletPods], token_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    source = started()
    wait_for(lambda: source.current().up)
    kubelet.token = "token-two"  # the old token no longer works
    wait_for(lambda: source.current().error == "unauthorized")
    assert source.current().kept and set(source.current().pods) == set(EXPECTED)
    # The kubelet swaps the projected token in by renaming, as this does.
    (token_file.parent / "token.new").write_text("token-two")
    os.replace(token_file.parent / "token.new", token_file)
    wait_for(lambda: source.current().up)
    assert kubelet.requests[-1] == ("/pods", "Bearer token-two")
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 3, lines
    assert lines[0] == f"kubelet pods: {kubelet.url} answers (3 pods)"
    assert lines[1].startswith(f"kubelet pods: GET {kubelet.url} failed (unauthorized: HTTP 401 Unauthorized)")
    assert lines[2] == f"kubelet pods: {kubelet.url} answers again (3 pods)"
    assert not any("token-" in line for line in lines)


def test_malformed_answer_keeps_the_last_one(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    source = started()
    wait_for(lambda: source.current().up)
    kubelet.body = b'{"items": [{"metadata": '
    wait_for(lambda: "malformed" in failures(source))
    state = source.current()
    assert not state.up and state.kept and set(state.pods) == set(EXPECTED)


@pytest.mark.parametrize("length", [None, -1], ids=["content-length", "close-delimited"])
def test_oversized_answer_is_refused(kubelet: Kubelet, started: Callable[..., KubeletPods], length: int | None) -> None:
    kubelet.length = length
    source = started(max_bytes=len(kubelet.body) - 1)
    wait_for(lambda: "too_large" in failures(source))
    assert not source.current().up and source.current().pods == {}
    fits = started(max_bytes=len(kubelet.body))
    wait_for(lambda: fits.current().up)


def test_slow_kubelet_times_out(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    kubelet.delay = 0.5
    source = started(timeout_seconds=0.2)
    wait_for(lambda: "timeout" in failures(source))


def test_answer_trickling_in_times_out_as_a_whole(kubelet: Kubelet, started: Callable[..., KubeletPods]) -> None:
    """Each byte comes well within the socket timeout, but the whole answer would take minutes."""
    kubelet.trickle = 0.05
    began = time.monotonic()
    source = started(timeout_seconds=0.5)
    wait_for(lambda: "timeout" in failures(source))
    assert time.monotonic() - began < 3.0


def test_kubelet_that_goes_away_is_kept_for_max_age_then_dropped_and_found_again(
    kubelet: Kubelet, started: Callable[..., KubeletPods], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    source = started(max_age_seconds=1.5)
    wait_for(lambda: source.current().up)
    kubelet.stop()
    wait_for(lambda: source.current().error == "unavailable")
    state = source.current()
    assert state.kept and set(state.pods) == set(EXPECTED) and not state.up
    wait_for(lambda: source.current().pods == {})
    assert not source.current().kept
    wait_for(lambda: any(r.getMessage().startswith("kubelet pods: dropped") for r in caplog.records))
    kubelet.start()  # the same port again
    wait_for(lambda: source.current().up)
    state = source.current()
    assert set(state.pods) == set(EXPECTED) and state.error == "" and dict(state.failures)["unavailable"] >= 2
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 4, lines
    assert lines[1].startswith(f"kubelet pods: GET {kubelet.url} failed (unavailable: ")
    assert lines[1].endswith("; keeping the last answer for up to 1.5 s")
    assert lines[2].startswith("kubelet pods: dropped the last answer, ")
    assert lines[3] == f"kubelet pods: {kubelet.url} answers again (3 pods)"


def test_never_started_and_stop_at_once(kubelet: Kubelet, token_file: Path) -> None:
    source = KubeletPods(kubelet.url, str(token_file), str(kubelet.certs.path("ca.crt")), refresh_seconds=60.0)
    assert source.current().pods == {} and source.current().calls == 0 and not source.current().up
    source.start()
    wait_for(lambda: source.current().up)
    began = time.monotonic()
    source.stop()
    assert time.monotonic() - began < 1.0
    assert len(kubelet.requests) == 1
