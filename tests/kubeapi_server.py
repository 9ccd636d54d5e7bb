"""A Kubernetes API server stand-in for tests: HTTPS on 127.0.0.1 (certificates of tests/webtls.py)
answering, to requests bearing ``token``, the list and watch requests the exporter makes:

- ``GET /apis/resource.k8s.io/VERSION/resourceslices`` (versions in ``versions``; others 404),
- ``GET /api/v1/pods``,
- ``GET /api/v1/nodes/NAME`` and ``PATCH /api/v1/nodes/NAME/status`` (a strategic merge patch of
  ``status.conditions``, merged by ``type`` as the API server merges them; each patch is recorded in
  ``patches``) for the nodes in ``nodes``,
- ``POST /api/v1/namespaces/NS/events`` (a core/v1 Event, JSON), checked as the API server's validation of
  core/v1 Events checks it (the object's namespace is the request's; an Event without ``eventTime``
  about an object without a namespace lives in ``default`` or in none; a name taken answers 409
  AlreadyExists; reason, involvedObject kind and name are required), recorded in ``events`` and
  answered 201 with the object; ``refuse_events`` (e.g. 403) answers event creation only with that
  status, ``lose_event_answers`` creates that many Events but answers each 500 (the answer lost),

in the API's JSON (``ResourceSliceList``/``PodList`` with ``metadata.resourceVersion``, pages by
``limit`` and ``continue``, objects filtered by the ``fieldSelector`` ``spec.nodeName=NODE``) and,
with ``watch=1``, the API's watch stream (chunked, one ``{"type": …, "object": …}`` line per event):
:meth:`KubeApi.publish` changes an object and sends its event to the open watches, :meth:`expire`
answers them (and watches from older versions) with an ``ERROR`` event of 410 Gone,
:meth:`drop_watches` breaks them off without the stream's end; a watch ends cleanly after its
``timeoutSeconds``. ``status`` (e.g. 403) answers every request with that status; a wrong token
gets 401, both as ``Status`` objects.
"""

from __future__ import annotations

import contextlib
import json
import queue
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.webtls import Certs

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"


def attribute(value: str | int) -> dict[str, Any]:
    return {"int": value} if isinstance(value, int) else {"string": value}


def gpu_device(name: str, uuid: str, index: int, basic: bool = False) -> dict[str, Any]:
    """A whole GPU as NVIDIA's DRA driver publishes it."""
    attributes = {"type": attribute("gpu"), "uuid": attribute(uuid), "index": attribute(index)}
    return {"name": name, "basic": {"attributes": attributes}} if basic else {"name": name, "attributes": attributes}


def mig_device(name: str, uuid: str, parent: str, profile: str, qualified: bool = False) -> dict[str, Any]:
    """A MIG device as NVIDIA's DRA driver publishes it (attribute names qualified with its domain if
    asked); ``uuid`` "": a dynamic MIG device, created only when a claim is prepared."""
    prefix = f"{DRIVER}/" if qualified else ""
    attributes = {
        f"{prefix}type": attribute("mig"), f"{prefix}parentUUID": attribute(parent),
        f"{prefix}profile": attribute(profile),
    }  # fmt: skip
    if uuid:
        attributes[f"{prefix}uuid"] = attribute(uuid)
    return {"name": name, "attributes": attributes}


def resource_slice(name: str, devices: list[dict[str, Any]], node: str = NODE, generation: int = 1,
                   driver: str = DRIVER, pool: str = NODE) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": f"slice-{name}", "resourceVersion": "1"},
        "spec": {
            "driver": driver, "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1}, "devices": devices,
        },
    }  # fmt: skip


def api_node(name: str = NODE) -> dict[str, Any]:
    """A Node object as the API server keeps it, with the kubelet's Ready condition."""
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "1"},
            "status": {"conditions": [ready]}}  # fmt: skip


def api_pod(namespace: str, name: str, uid: str, containers: dict[str, str], node: str = NODE,
            labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A pod: containers as {container id (64 hex): name}."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}, "resourceVersion": "1"},
        "spec": {"nodeName": node},
        "status": {
            "containerStatuses": [{"name": n, "containerID": f"containerd://{i}"} for i, n in containers.items()]
        },
    }


def _namespace_invalid(namespace: str, event: dict[str, Any]) -> bool:
    """The API server's rule for an Event's namespace: with ``eventTime`` (the events.k8s.io form) an
    object without a namespace has its events in ``default`` or ``kube-system``; without it (the legacy
    core/v1 form) in ``default`` or none; an object with a namespace has its events in that namespace."""
    involved = (event.get("involvedObject") or {}).get("namespace", "")
    if event.get("eventTime"):
        return not involved and namespace not in ("default", "kube-system")
    return namespace not in ("", "default") if not involved else namespace != involved


class KubeApi:
    """Serves ``slices`` and ``pods`` while started; records each request as (path, Authorization)."""

    def __init__(self, certs: Certs) -> None:
        self.certs = certs
        self.token = "api-token-one"
        self.slices: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.nodes: dict[str, dict[str, Any]] = {}
        self.patches: list[dict[str, Any]] = []  # the body of each PATCH accepted
        self.events: list[dict[str, Any]] = []  # each Event created
        self.refuse_events = 0  # a status to answer every event creation with (0: none)
        self.lose_event_answers = 0  # Events created whose answer is a 500 nonetheless
        self.versions = ("v1", "v1beta1")
        self.status = 200
        self.requests: list[tuple[str, str]] = []
        self.port = 0
        self.version = 100  # the resourceVersion now; each published event adds one
        self.oldest = 0  # watches from an older version are answered 410 Gone
        self._watches: list[tuple[str, queue.Queue[dict[str, Any] | None]]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        #: A test's hostile answer: called with the request handler and the query; True when it answered.
        self.hostile: Callable[[BaseHTTPRequestHandler, dict[str, str]], bool] | None = None

    def _objects(self, path: str) -> tuple[str, list[dict[str, Any]]] | None:
        if path == "/api/v1/pods":
            return "PodList", self.pods
        for version in self.versions:
            if path == f"/apis/resource.k8s.io/{version}/resourceslices":
                return "ResourceSliceList", self.slices
        return None

    def answer(self, raw_path: str, authorization: str) -> tuple[int, bytes]:
        """(status, body) for one GET."""
        with self._lock:
            self.requests.append((raw_path, authorization))
        parts = urllib.parse.urlsplit(raw_path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        if authorization != f"Bearer {self.token}":
            return 401, self._status(401, "Unauthorized")
        if self.status != 200:
            return self.status, self._status(self.status, "Refused")
        if parts.path.startswith("/api/v1/nodes/"):
            with self._lock:
                node = self.nodes.get(parts.path.removeprefix("/api/v1/nodes/"))
                return (200, json.dumps(node).encode()) if node else (404, self._status(404, "NotFound"))
        found = self._objects(parts.path)
        if found is None:
            return 404, self._status(404, "NotFound")
        kind, objects = found
        selector = query.get("fieldSelector", "")
        if selector:
            key, _, wanted = selector.partition("=")
            assert key == "spec.nodeName", selector
            objects = [o for o in objects if o["spec"].get("nodeName") == wanted]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(objects)
        page = objects[start : start + limit]
        more = start + limit < len(objects)
        metadata = {"resourceVersion": str(self.version), **({"continue": str(start + limit)} if more else {})}
        api_version = "v1" if kind == "PodList" else parts.path.split("/")[3]
        body = {"apiVersion": api_version, "kind": kind, "metadata": metadata, "items": page}
        return 200, json.dumps(body).encode()

    def patch(self, raw_path: str, authorization: str, content_type: str, body: bytes) -> tuple[int, bytes]:
        """(status, body) for one PATCH of a node's status: conditions merged by ``type``."""
        with self._lock:
            self.requests.append((raw_path, authorization))
        path = urllib.parse.urlsplit(raw_path).path
        if authorization != f"Bearer {self.token}":
            return 401, self._status(401, "Unauthorized")
        if self.status != 200:
            return self.status, self._status(self.status, "Refused")
        name = path.removeprefix("/api/v1/nodes/").removesuffix("/status")
        if not path.startswith("/api/v1/nodes/") or not path.endswith("/status") or name not in self.nodes:
            return 404, self._status(404, "NotFound")
        if content_type != "application/strategic-merge-patch+json":
            return 415, self._status(415, "UnsupportedMediaType")
        patch = json.loads(body)
        with self._lock:
            node = self.nodes[name]
            conditions = node.setdefault("status", {}).setdefault("conditions", [])
            for condition in patch["status"]["conditions"]:
                kept = [c for c in conditions if c["type"] != condition["type"]]
                previous = next((c for c in conditions if c["type"] == condition["type"]), {})
                conditions[:] = [*kept, {**previous, **condition}]
            self.patches.append(patch)
            self.version += 1
            node["metadata"]["resourceVersion"] = str(self.version)
            return 200, json.dumps(node).encode()

    def create_event(self, raw_path: str, authorization: str, content_type: str, body: bytes) -> tuple[int, bytes]:
        """(status, body) for one POST of a core/v1 Event."""
        with self._lock:
            self.requests.append((raw_path, authorization))
        parts = urllib.parse.urlsplit(raw_path).path.split("/")
        if authorization != f"Bearer {self.token}":
            return 401, self._status(401, "Unauthorized")
        if self.status != 200:
            return self.status, self._status(self.status, "Refused")
        if len(parts) != 6 or parts[:4] != ["", "api", "v1", "namespaces"] or parts[5] != "events":
            return 404, self._status(404, "NotFound")
        if self.refuse_events:
            return self.refuse_events, self._status(self.refuse_events, "Refused")
        if content_type != "application/json":
            return 415, self._status(415, "UnsupportedMediaType")
        namespace, event = parts[4], json.loads(body)
        metadata, involved = event.get("metadata") or {}, event.get("involvedObject") or {}
        if metadata.get("namespace", namespace) != namespace:
            return 400, self._status(400, "BadRequest")  # the object's namespace is not the request's
        invalid = [
            not metadata.get("name"), event.get("kind") != "Event", not event.get("reason"),
            not involved.get("kind") or not involved.get("name"), _namespace_invalid(namespace, event),
        ]  # fmt: skip
        if any(invalid):
            return 422, self._status(422, "Invalid")
        with self._lock:
            if any(e["metadata"]["name"] == metadata["name"] for e in self.events):
                return 409, self._status(409, "AlreadyExists")
            self.version += 1
            stored = {**event, "metadata": {**metadata, "namespace": namespace, "resourceVersion": str(self.version)}}
            self.events.append(stored)
            if self.lose_event_answers:
                self.lose_event_answers -= 1
                return 500, self._status(500, "InternalError")
            return 201, json.dumps(stored).encode()

    def condition(self, node: str, type_: str) -> dict[str, Any] | None:
        """Condition ``type_`` of ``node`` now."""
        with self._lock:
            conditions = self.nodes[node].get("status", {}).get("conditions", [])
            return next((dict(c) for c in conditions if c["type"] == type_), None)

    def publish(self, kind: str, obj: dict[str, Any], plural: str = "resourceslices") -> None:
        """Apply one event (``ADDED``, ``MODIFIED``, ``DELETED``) of ``obj`` to the ``plural`` served
        (``resourceslices`` or ``pods``) and send it to the open watches of ``plural``."""
        with self._lock:
            self.version += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version)}}
            stored = self.slices if plural == "resourceslices" else self.pods
            kept = [o for o in stored if o["metadata"]["name"] != obj["metadata"]["name"]]
            stored[:] = kept if kind == "DELETED" else [*kept, obj]
            for watched, events in self._watches:
                if watched == plural:
                    events.put({"type": kind, "object": obj})

    def expire(self) -> None:
        """Forget every version so far: open watches get an ERROR event of 410, as do watches from them."""
        with self._lock:
            self.version += 1
            self.oldest = self.version
            gone = {"type": "ERROR", "object": json.loads(self._status(410, "Expired"))}
            for _watched, events in self._watches:
                events.put(gone)

    def drop_watches(self) -> None:
        """Break off every open watch stream (no end chunk: the client sees a broken stream)."""
        with self._lock:
            for _watched, events in self._watches:
                events.put(None)

    def watches(self) -> int:
        """Watch streams open now."""
        with self._lock:
            return len(self._watches)

    def watch(self, handler: BaseHTTPRequestHandler, raw_path: str) -> bool:
        """Serve a watch request as a stream, if it is one (else False)."""
        parts = urllib.parse.urlsplit(raw_path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        if query.get("watch") not in ("1", "true"):
            return False
        authorization = handler.headers.get("Authorization", "")
        if authorization != f"Bearer {self.token}" or self.status != 200 or self._objects(parts.path) is None:
            return False  # refused as a list request would be
        with self._lock:
            self.requests.append((raw_path, authorization))
        plural = "pods" if parts.path.endswith("/pods") else "resourceslices"
        events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        with self._lock:
            if int(query.get("resourceVersion") or 0) < self.oldest:
                events.put({"type": "ERROR", "object": json.loads(self._status(410, "Expired"))})
            self._watches.append((plural, events))
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            while time.monotonic() < deadline:
                try:
                    event = events.get(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    continue
                if event is None:
                    return True  # dropped: the connection closes without the last chunk
                line = json.dumps(event).encode() + b"\n"
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                handler.wfile.flush()
                if event["type"] == "ERROR":
                    break
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away
        finally:
            with self._lock:
                self._watches = [w for w in self._watches if w[1] is not events]
        return True

    @staticmethod
    def _status(code: int, reason: str) -> bytes:
        return json.dumps(
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason, "reason": reason,
             "code": code}
        ).encode()  # fmt: skip

    def start(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # the name http.server calls
                self.close_connection = True
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                if api.hostile is not None and api.hostile(self, query):
                    return
                if api.watch(self, self.path):
                    return
                status, body = api.answer(self.path, self.headers.get("Authorization", ""))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")  # so that stop() leaves no connection answering
                self.close_connection = True
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up
                    self.wfile.write(body)

            def do_PATCH(self) -> None:  # the name http.server calls
                self._write(api.patch)

            def do_POST(self) -> None:  # the name http.server calls
                self._write(api.create_event)

            def _write(self, handle: Callable[[str, str, str, bytes], tuple[int, bytes]]) -> None:
                """A PATCH or POST: its body to ``handle``, whose JSON answer closes the connection."""
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = handle(self.path, self.headers.get("Authorization", ""),
                                        self.headers.get("Content-Type", ""), body)  # fmt: skip
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:  # http.server's signature
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.certs.path("server.crt")), str(self.certs.path("server.key")))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.drop_watches()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        with self._lock:
            return [urllib.parse.urlsplit(path).path for path, _ in self.requests]
