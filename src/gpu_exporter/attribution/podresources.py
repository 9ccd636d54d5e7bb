"""Which pod holds each GPU: the kubelet's pod-resources v1 API, asked on a cadence of its own.

A daemon thread calls ``v1.PodResourcesLister/List`` over the kubelet's unix socket (default
:data:`SOCKET`) every ``refresh_seconds`` (at most once per period, never per scrape), keeps the GPU
allocations of the answer (resources :func:`~.deviceids.is_gpu_resource` accepts) with each device
id resolved to a GPU and MIG UUID, and the devices of Dynamic Resource Allocation claims
(``dynamic_resources``: claim name and namespace, driver, pool, device) of the drivers in
``dra_drivers`` (default :data:`DRA_DRIVERS`), left unresolved here (the node's ResourceSlices name
their UUIDs, :mod:`.resourceslices`; the join resolves them), and publishes an immutable :class:`PodResourcesState` that
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import grpc
from google.protobuf.message import DecodeError

from gpu_exporter.attribution.deviceids import GpuIds, is_gpu_resource, resolve
from gpu_exporter.attribution.proto.podresources_v1_pb2 import ListPodResourcesResponse
from gpu_exporter.attribution.refresh import Failure, Refresher

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
#: The DRA drivers whose claimed devices are GPUs: NVIDIA's DRA driver for GPUs and MIG devices.
DRA_DRIVERS = frozenset({"gpu.nvidia.com"})
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
    # Dynamic Resource Allocation: the claim (name, namespace) and the device's DRA driver and pool
    # (``device_id`` is then the device's name in the pool); "" for device-plugin allocations.
    claim: str = ""
    claim_namespace: str = ""
    driver: str = ""
    pool: str = ""


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


_Failure = Failure


def resolve_all(allocations: Sequence[Allocation], gpus: Sequence[GpuIds]) -> tuple[Allocation, ...]:
    """``allocations`` with GPU and MIG UUIDs resolved again against ``gpus``."""
    return tuple(
        a if a.driver else replace(a, gpu_uuid=g, mig_uuid=m)
        for a in allocations
        for g, m in [resolve(a.device_id, gpus)]
    )


def parse(
    answer: bytes, extra: frozenset[str], gpus: Sequence[GpuIds], dra_drivers: frozenset[str] = DRA_DRIVERS
) -> tuple[Allocation, ...]:
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
            for claim in container.dynamic_resources:
                for each in claim.claim_resources:
                    if each.driver_name not in dra_drivers or not each.device_name:
                        continue
                    names = (pod.namespace, pod.name, container.name, each.driver_name, each.device_name)
                    named = (claim.claim_name, claim.claim_namespace, each.pool_name)
                    if max(map(len, names + named)) > MAX_NAME:
                        raise _Failure("malformed", f"a name is longer than {MAX_NAME} characters")
                    found.add(Allocation(*names, "", "", *named[:2], each.driver_name, each.pool_name))
                    if len(found) > MAX_ALLOCATIONS:
                        raise _Failure("too_large", f"more than {MAX_ALLOCATIONS} GPU allocations")
    return tuple(sorted(found, key=lambda a: (a.namespace, a.pod, a.container, a.resource, a.device_id)))


class PodResources(Refresher[PodResourcesState, tuple[Allocation, ...]]):
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
        dra_drivers: frozenset[str] = DRA_DRIVERS,
    ) -> None:
        """``resources``: GPU resource names besides ``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` and
        ``nvidia.com/mig-*``; ``gpus``: the GPUs to resolve device ids against, asked on each refresh."""
        self._socket = socket_path
        self._extra = resources
        self._gpus = gpus
        self._max_bytes = max_answer_bytes
        self._dra = dra_drivers
        super().__init__(
            log, "pod-resources", "allocations", (), PodResourcesState(), refresh_seconds, max_age_seconds,
            timeout_seconds,
        )  # fmt: skip

    def _prepare(self) -> None:
        if not os.path.exists(self._socket):
            raise _Failure("socket_missing", f"no socket at {self._socket}")

    def _ask(self) -> tuple[Allocation, ...]:
        return parse(self._call(), self._extra, self._gpus(), self._dra)

    def _answered(
        self, answer: tuple[Allocation, ...], calls: int, failures: tuple[tuple[str, int], ...], fetched_at: float
    ) -> PodResourcesState:
        return PodResourcesState(answer, True, fetched_at, "", calls, failures)

    def _what(self) -> str:
        return f"List on {self._socket}"

    def _up_line(self, answer: tuple[Allocation, ...], again: str) -> str:
        return f"pod-resources: the kubelet answers{again} on {self._socket} ({len(answer)} GPU allocations)"

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
