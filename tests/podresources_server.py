"""A kubelet stand-in for tests: a real gRPC server on a unix socket serving pod-resources v1 ``List``.

It answers with whatever the test sets (a ``ListPodResourcesResponse``, or raw bytes to send a
malformed answer), counts the calls it is asked, can be slowed down, and can be stopped and started
again on the same socket path (a kubelet restart).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from gpu_exporter.attribution.proto.podresources_v1_pb2 import (
    ContainerDevices,
    ContainerResources,
    ListPodResourcesRequest,
    ListPodResourcesResponse,
    PodResources,
)


def pod(namespace: str, name: str, *containers: tuple[str, list[tuple[str, list[str]]]]) -> PodResources:
    """A pod: containers as (name, [(resource, [device ids])])."""
    return PodResources(
        name=name,
        namespace=namespace,
        containers=[
            ContainerResources(name=c, devices=[ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devs])
            for c, devs in containers
        ],
    )


class FakeKubelet:
    """Serves ``v1.PodResourcesLister/List`` on ``socket_path`` while started."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.answer: bytes = ListPodResourcesResponse().SerializeToString()
        self.delay = 0.0
        self.calls = 0
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    def set_pods(self, *pods: PodResources) -> None:
        self.answer = ListPodResourcesResponse(pod_resources=pods).SerializeToString()

    def _list(self, request: ListPodResourcesRequest, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        return self.answer

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._list,
            request_deserializer=ListPodResourcesRequest.FromString,
            response_serializer=lambda answer: answer,  # the answer is serialized already (or deliberately not)
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler}),)
        )
        server.add_insecure_port("unix:" + self.socket_path)
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
