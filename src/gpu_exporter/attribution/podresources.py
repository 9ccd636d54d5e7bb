"""Which pod holds each GPU: the kubelet's pod-resources v1 API, asked on a cadence of its own.

A daemon thread calls ``v1.PodResourcesLister/List`` over the kubelet's unix socket (default
:data:`SOCKET`) every ``refresh_seconds`` (at most once per period, never per scrape), keeps the GPU
allocations of the answer (resources :func:`~.deviceids.is_gpu_resource` accepts) with each device
id resolved to a GPU and MIG UUID, and publishes an immutable :class:`PodResourcesState` that
:meth:`PodResources.current` hands out without blocking.

Each call opens a fresh connection (so a restarted kubelet is found again at the next refresh, not
after gRPC's reconnect back-off) with a deadline (``timeout_seconds``) and a bound on the answer
(``max_answer_bytes``, refused by gRPC before it is decoded). An answer that does not decode, holds
more than :data:`MAX_ALLOCATIONS` GPU allocations or a name longer than :data:`MAX_NAME` characters
is refused whole. A failure keeps the last good answer for ``max_age_seconds``, then drops it; each
is counted by kind (:data:`FAILURE_KINDS`) and nothing is ever raised to the caller. One log line is
written per change of state (answering, failing with another kind, answer dropped (logged by the
first refresh after it), answering again).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import grpc
from google.protobuf.message import DecodeError

from gpu_exporter.attribution.deviceids import GpuIds, is_gpu_resource, resolve
from gpu_exporter.attribution.proto.podresources_v1_pb2 import ListPodResourcesResponse
from gpu_exporter.attribution.refresh import keeps, log_failure, run_every

log = logging.getLogger(__name__)

SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: The gRPC method path: package ``v1``, service ``PodResourcesLister``, method ``List``.
LIST_METHOD = "/v1.PodResourcesLister/List"
MAX_ANSWER_BYTES = 4 * 1024 * 1024
MAX_ALLOCATIONS = 16384
MAX_NAME = 1024
#: ``socket_missing``: no file at the path; ``unavailable``: nothing answers (kubelet down, no
#: permission); ``timeout``: no answer within the deadline; ``too_large``: over the answer bounds;
#: ``malformed``: not a pod-resources answer; ``error``: any other gRPC status or failure.
FAILURE_KINDS = ("socket_missing", "unavailable", "timeout", "too_large", "malformed", "error")


@dataclass(frozen=True)
class Allocation:
    """One device the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource: str  # e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb
    device_id: str  # as the kubelet reports it
    gpu_uuid: str  # the GPU's UUID; "" when the id names no known GPU
    mig_uuid: str = ""  # the MIG device's UUID where the id names one


@dataclass(frozen=True)
class PodResourcesState:
    """What the kubelet last said, and how asking it has gone."""

    allocations: tuple[Allocation, ...] = ()  # sorted; () before any answer and once dropped
    up: bool = False  # the last call was answered with a good answer
    fetched_at: float = 0.0  # Unix time (seconds) of the last good answer; 0.0 before any
    error: str = ""  # kind of the last failure (one of FAILURE_KINDS); "" after a good answer
    calls: int = 0  # List calls sent to the kubelet
    failures: tuple[tuple[str, int], ...] = ()  # (kind, count) for each kind seen, by kind
    kept: bool = False  # allocations are an earlier answer, kept through failures


class _Failure(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def resolve_all(allocations: Sequence[Allocation], gpus: Sequence[GpuIds]) -> tuple[Allocation, ...]:
    """``allocations`` with GPU and MIG UUIDs resolved again against ``gpus``."""
    return tuple(replace(a, gpu_uuid=g, mig_uuid=m) for a in allocations for g, m in [resolve(a.device_id, gpus)])


def parse(answer: bytes, extra: frozenset[str], gpus: Sequence[GpuIds]) -> tuple[Allocation, ...]:
    """The GPU allocations in a serialized ``ListPodResourcesResponse``; raises ``_Failure`` when refused."""
    try:
        response = ListPodResourcesResponse.FromString(answer)
    except DecodeError as exc:
        raise _Failure("malformed", f"answer does not decode: {exc}") from None
    found: set[Allocation] = set()
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, extra):
                    continue
                for device_id in devices.device_ids:
                    names = (pod.namespace, pod.name, container.name, devices.resource_name, device_id)
                    if max(map(len, names)) > MAX_NAME:
                        raise _Failure("malformed", f"a name is longer than {MAX_NAME} characters")
                    gpu_uuid, mig_uuid = resolve(device_id, gpus)
                    found.add(Allocation(*names, gpu_uuid=gpu_uuid, mig_uuid=mig_uuid))
                    if len(found) > MAX_ALLOCATIONS:
                        raise _Failure("too_large", f"more than {MAX_ALLOCATIONS} GPU allocations")
    return tuple(sorted(found, key=lambda a: (a.namespace, a.pod, a.container, a.resource, a.device_id)))


class PodResources:
    """GPU allocations from the kubelet, refreshed on a daemon thread and read without blocking."""

    def __init__(
        self,
        socket_path: str = SOCKET,
        refresh_seconds: float = 10.0,
        resources: frozenset[str] = frozenset(),
        max_age_seconds: float = 60.0,
        *,
        gpus: Callable[[], Sequence[GpuIds]] = tuple,
        timeout_seconds: float = 5.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        """``resources``: GPU resource names besides ``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` and
        ``nvidia.com/mig-*``; ``gpus``: the GPUs to resolve device ids against, asked on each refresh."""
        self._socket = socket_path
        self._refresh = refresh_seconds
        self._extra = resources
        self._max_age = max_age_seconds
        self._gpus = gpus
        self._timeout = timeout_seconds
        self._max_bytes = max_answer_bytes
        self._clock: Callable[[], float] = time.monotonic
        # (state, monotonic time of its answer): replaced whole, so a reader never sees half of it.
        self._published: tuple[PodResourcesState, float] = (PodResourcesState(), 0.0)
        self._failures: dict[str, int] = {}
        self._logged = ""  # the state last logged: "up" or a failure kind
        self._refreshing = threading.Lock()  # one refresh at a time, should a caller also call refresh()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the refresh thread (once); the first call is made at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pod-resources", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the refresh thread, waiting at most one call timeout for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._timeout + 1.0)

    def current(self) -> PodResourcesState:
        """The latest state; an answer older than ``max_age_seconds`` that failures kept is left out."""
        state, answered = self._published
        if state.kept and self._clock() - answered > self._max_age:
            return replace(state, allocations=(), kept=False)
        return state

    def refresh(self) -> None:
        """Ask the kubelet once and publish the outcome (the thread calls this; never raises)."""
        with self._refreshing:
            self._refresh_once()

    def _refresh_once(self) -> None:
        state, answered = self._published
        calls = state.calls
        try:
            if not os.path.exists(self._socket):
                raise _Failure("socket_missing", f"no socket at {self._socket}")
            calls += 1
            answer = self._call()
            allocations = parse(answer, self._extra, self._gpus())
        except _Failure as failure:
            self._failed(state, answered, calls, failure.kind, str(failure))
            return
        except Exception as exc:  # noqa: BLE001 - the gpus callable or gRPC itself; a refresh must not end the thread
            self._failed(state, answered, calls, "error", f"{type(exc).__name__}: {exc}")
            return
        now = self._clock()
        self._published = (
            PodResourcesState(allocations, True, time.time(), "", calls, tuple(sorted(self._failures.items()))),
            now,
        )
        if self._logged != "up":
            again = " again" if state.fetched_at else ""
            log.info(
                "pod-resources: the kubelet answers%s on %s (%d GPU allocations)", again, self._socket, len(allocations)
            )
            self._logged = "up"

    def _call(self) -> bytes:
        options = [("grpc.max_receive_message_length", self._max_bytes), ("grpc.max_send_message_length", 1024)]
        try:
            with grpc.insecure_channel("unix:" + os.path.abspath(self._socket), options=options) as channel:
                call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(LIST_METHOD)
                answer = call(b"", timeout=self._timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else None) or ""
            kinds = {
                grpc.StatusCode.UNAVAILABLE: "unavailable",
                grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
                grpc.StatusCode.RESOURCE_EXHAUSTED: "too_large",
            }
            raise _Failure(kinds.get(code, "error"), f"{code.name}: {details[:200]}") from None
        if not isinstance(answer, bytes):
            raise _Failure("malformed", "answer is not bytes")
        return answer

    def _failed(self, state: PodResourcesState, answered: float, calls: int, kind: str, detail: str) -> None:
        self._failures[kind] = self._failures.get(kind, 0) + 1
        age = self._clock() - answered
        keep = keeps(bool(state.allocations), age, self._max_age)
        failures = tuple(sorted(self._failures.items()))
        allocations = state.allocations if keep else ()
        self._published = (
            replace(state, allocations=allocations, up=False, error=kind, calls=calls, failures=failures, kept=keep),
            answered,
        )
        self._logged = log_failure(
            log,
            "pod-resources",
            f"List on {self._socket}",
            kind,
            detail,
            self._logged,
            bool(state.allocations),
            keep,
            age,
            self._max_age,
        )

    def _run(self) -> None:
        run_every(self.refresh, self._stop, self._clock, self._refresh)
