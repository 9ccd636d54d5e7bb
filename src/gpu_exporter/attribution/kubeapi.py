"""The Kubernetes API server as an attribution source: this node's ResourceSlices (the UUIDs of the
devices DRA claims name) and this node's pods (names of the pod UIDs in process cgroups), each
listed and then watched from the list's ``resourceVersion`` by a daemon thread of its own
(:mod:`.kubewatch`: a change is attributed within a second; every end of a watch, and at the latest
the list cadence, leads to a fresh list), never per scrape.

The client is ``httpx2`` (the HTTP library lightkube uses) with the list and watch requests written
here (:mod:`.kubewatch`), so that every byte is bounded before it is buffered: lists with field
selectors and pages (``limit``/``continue``), each page read raw and decompressed within a byte
bound; the server verified against a CA file; the bearer token read from its file for every
request, so a rotated projected service-account token is picked up. Requests:

- ``GET /apis/resource.k8s.io/{v1,v1beta2,v1beta1}/resourceslices?fieldSelector=spec.nodeName=NODE``
  (the first version the server serves is remembered; parsed by :mod:`.resourceslices`);
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=NODE`` (parsed as the kubelet's ``/pods``,
  :func:`.kubeletpods.pods_of`).

RBAC: ``get``, ``list`` and ``watch`` on ``resourceslices`` (group ``resource.k8s.io``) and ``pods``
(core group); nothing else. Each request is bounded by ``timeout_seconds``, each page by
:data:`~.kubewatch.MAX_PAGE_BYTES` and each answer by :data:`MAX_OBJECTS`. A failure (by kind,
:data:`FAILURE_KINDS`) is counted, keeps the last good answer for ``max_age_seconds`` and is
logged once per change of state (:mod:`.refresh`); without access the kubelet's device-plugin
attribution goes on, and DRA allocations stay unattributed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.attribution.kubeletpods import PodName, pods_of
from gpu_exporter.attribution.kubewatch import MAX_OBJECTS, Watched, WatchStream
from gpu_exporter.attribution.refresh import Failure
from gpu_exporter.attribution.resourceslices import EMPTY, Devices
from gpu_exporter.attribution.resourceslices import parse as parse_slices

log = logging.getLogger(__name__)

PAGE = 500
SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")
#: ``token``: the token file is missing or unreadable; ``ca``: the CA file holds no certificate;
#: ``tls``: the server's certificate is not verified; ``unavailable``: nothing answers;
#: ``timeout``: no answer in time; ``unauthorized``: HTTP 401 or 403 (no RBAC grant);
#: ``not_found``: HTTP 404 (no DRA API on this server); ``http``: any other status;
#: ``too_large``: over MAX_OBJECTS objects; ``malformed``: not the objects asked for; ``error``: else.
FAILURE_KINDS = (
    "token", "ca", "tls", "unavailable", "timeout", "unauthorized", "not_found", "http", "too_large", "malformed",
    "error",
)  # fmt: skip
_NO_PODS: Mapping[str, PodName] = {}


class ApiClient:
    """One API server (``url``): its address, token file, CA file and request timeout."""

    def __init__(self, url: str, token_file: str, ca_file: str, timeout_seconds: float) -> None:
        self.url = url
        self._token_file = token_file
        self._ca_file = ca_file
        self.timeout_seconds = timeout_seconds

    def stream(self) -> WatchStream:
        """A client of this server's own (one per source: each lists and ends its own watch)."""
        return WatchStream(self.url, self._token_file, self._ca_file, self.timeout_seconds)

    def list(
        self, stream: WatchStream, group: str, version: str, kind: str, plural: str, node: str
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``kind`` on ``node`` (as JSON objects), in pages of :data:`PAGE`, and the
        list's ``resourceVersion``; raises :class:`Failure`. Each page is bounded in bytes as it is
        read (:data:`~.kubewatch.MAX_PAGE_BYTES`, decompressed), the whole list by :data:`MAX_OBJECTS`."""
        path = f"/apis/{group}/{version}/{plural}" if group else f"/api/{version}/{plural}"
        found: list[dict[str, Any]] = []
        listed, more = "", ""
        while True:
            params = {"fieldSelector": f"spec.nodeName={node}", "limit": str(PAGE)}
            if more:
                params["continue"] = more
            page = stream.get(path, params)
            items, metadata = page.get("items"), page.get("metadata")
            if not isinstance(metadata, dict) or not isinstance(items, list | None) or page.get("kind") not in (
                None, f"{kind}List"
            ):  # fmt: skip
                raise Failure("malformed", f"the answer is not a {kind}List")
            for item in items or ():
                if not isinstance(item, dict):
                    raise Failure("malformed", f"an item of the {kind}List is not an object")
                found.append(item)
            if len(found) > MAX_OBJECTS:
                raise Failure("too_large", f"more than {MAX_OBJECTS} {plural}")
            listed = listed or str(metadata.get("resourceVersion") or "")
            more = str(metadata.get("continue") or "")
            if not more:
                return found, listed


@dataclass(frozen=True)
class ResourceSlicesState:
    """The DRA devices this node's ResourceSlices publish, and how asking for them has gone."""

    devices: Devices = field(default_factory=lambda: EMPTY)  # (driver, pool, device) → UUIDs
    up: bool = False
    calls: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    fetched_at: float = 0.0
    error: str = ""
    kept: bool = False


@dataclass(frozen=True)
class NodePodsState:
    """This node's pods by UID (as :class:`~.kubeletpods.KubeletPodsState`), with their labels."""

    pods: Mapping[str, PodName] = field(default_factory=lambda: _NO_PODS)
    up: bool = False
    calls: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    fetched_at: float = 0.0
    error: str = ""
    kept: bool = False


class ResourceSlices(Watched[ResourceSlicesState, Devices]):
    """The devices of ``drivers`` this node's ResourceSlices publish, listed every ``refresh_seconds``
    and watched in between."""

    def __init__(
        self, api: ApiClient, node: str, drivers: frozenset[str], refresh_seconds: float, max_age_seconds: float
    ) -> None:
        self._api = api
        self._node = node
        self._drivers = drivers
        self._version = SLICE_VERSIONS[0]
        self._stream = api.stream()
        super().__init__(
            log, "kubernetes resourceslices", "devices", EMPTY, ResourceSlicesState(), refresh_seconds,
            max_age_seconds, api.timeout_seconds,
        )  # fmt: skip

    def _ask(self) -> Devices:
        order = (self._version, *(v for v in SLICE_VERSIONS if v != self._version))
        for version in order:
            try:
                items, listed = self._api.list(
                    self._stream, "resource.k8s.io", version, "ResourceSlice", "resourceslices", self._node
                )
            except Failure as failure:
                if failure.kind == "not_found" and version != order[-1]:
                    continue
                raise
            self._version = version
            answer = parse_slices(items, self._drivers)
            self._listed(items, listed)
            return answer
        raise Failure("not_found", "no resource.k8s.io version served")  # not reached

    def _parse(self, items: list[dict[str, Any]]) -> Devices:
        return parse_slices(items, self._drivers)

    def _watch_path(self) -> str:
        return f"/apis/resource.k8s.io/{self._version}/resourceslices"

    def _answered(
        self, answer: Devices, calls: int, failures: tuple[tuple[str, int], ...], fetched_at: float
    ) -> ResourceSlicesState:
        return ResourceSlicesState(answer, True, calls, failures, fetched_at)

    def _what(self) -> str:
        return f"listing resource.k8s.io/{self._version} resourceslices of node {self._node} at {self._api.url}"

    def _up_line(self, answer: Devices, again: str) -> str:
        return (
            f"kubernetes resourceslices: {self._api.url} answers{again} (resource.k8s.io/{self._version}, "
            f"{len(answer)} DRA devices of {', '.join(sorted(self._drivers))} on node {self._node})"
        )


class NodePods(Watched[NodePodsState, Mapping[str, PodName]]):
    """This node's pods from the API server, listed every ``refresh_seconds`` and watched in between."""

    def __init__(self, api: ApiClient, node: str, refresh_seconds: float, max_age_seconds: float) -> None:
        self._api = api
        self._node = node
        self._stream = api.stream()
        super().__init__(
            log,
            "kubernetes pods",
            "pods",
            _NO_PODS,
            NodePodsState(),
            refresh_seconds,
            max_age_seconds,
            api.timeout_seconds,
        )

    def _ask(self) -> Mapping[str, PodName]:
        items, listed = self._api.list(self._stream, "", "v1", "Pod", "pods", self._node)
        answer = pods_of(items)
        self._listed(items, listed)
        return answer

    def _parse(self, items: list[dict[str, Any]]) -> Mapping[str, PodName]:
        return pods_of(items)

    def _watch_path(self) -> str:
        return "/api/v1/pods"

    def _answered(
        self, answer: Mapping[str, PodName], calls: int, failures: tuple[tuple[str, int], ...], fetched_at: float
    ) -> NodePodsState:
        return NodePodsState(answer, True, calls, failures, fetched_at)

    def _what(self) -> str:
        return f"listing pods of node {self._node} at {self._api.url}"

    def _up_line(self, answer: Mapping[str, PodName], again: str) -> str:
        return f"kubernetes pods: {self._api.url} answers{again} ({len(answer)} pods on node {self._node})"


def api_url(setting: str, env: Mapping[str, str]) -> str:
    """``--kubernetes.api-url``: ``auto`` is the in-cluster address where the pod's variables give one."""
    if setting != "auto":
        return setting
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return ""
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
