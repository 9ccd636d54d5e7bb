"""Watching what a Kubernetes API source listed: after each successful list, one streamed
``GET PATH?watch=1&allowWatchBookmarks=true&resourceVersion=RV&timeoutSeconds=T&fieldSelector=…``
on the source's own daemon thread, so a new ResourceSlice device or pod is attributed within a
second instead of at the next list.

The answer is the API's watch stream: one JSON object a line, ``{"type": …, "object": …}`` with
``type`` ``ADDED``, ``MODIFIED`` or ``DELETED`` (the object, applied to the listed objects by
namespace and name, all of them parsed again as the list is), ``BOOKMARK`` (only
``object.metadata.resourceVersion``, the version reached: nothing listed changes; as every end of
a watch is followed by a list, the version reached is only logged) or ``ERROR`` (a ``Status`` object).
Every end of a watch leads to a fresh list: the server closing it after ``timeoutSeconds`` (the
source's list cadence, so the periodic list stays as the safety net), ``ERROR`` (410 Gone: the
version is too old), a dropped stream, nothing read for ``timeoutSeconds`` plus the request
timeout, or a line that is not an event. The client is a plain ``httpx2`` stream (the HTTP library
lightkube itself uses; lightkube's own watch neither asks for bookmarks nor says when a stream
ends): the CA file verifies the server, the token file is read again for every watch (a rotated
token is picked up), each event is bounded by :data:`MAX_LINE` bytes as it is read (decompressed:
:mod:`.bounded`), and a watch ends after ``timeoutSeconds`` plus the request timeout even when the
server goes on sending.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from gpu_exporter.attribution.bounded import body, decoded, lines
from gpu_exporter.attribution.refresh import Failure, Refresher, SourceState
from gpu_exporter.logs import LIMITED

S = TypeVar("S", bound=SourceState)
A = TypeVar("A")

MAX_LINE = 4 * 1024 * 1024  # bytes: one event (a ResourceSlice of 128 devices is ~100 KiB)
PUBLISH_EVERY = 0.5  # seconds: the least time between two publications of watched changes
#: The most objects of one kind held from a list or a watch (a node runs at most a few hundred pods).
MAX_OBJECTS = 20000
MAX_PAGE_BYTES = 16 * 1024 * 1024  # bytes: one list page, decompressed (500 pods with managedFields: ~10 MiB)


class Gone(Exception):
    """The server no longer has the version asked for (HTTP 410, or an ``ERROR`` event of 410)."""


def tls_client(url: str, ca_file: str) -> Any:
    """An httpx2 client of the API server at ``url`` that trusts ``ca_file``; raises :class:`Failure` ("ca")."""
    import httpx2

    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ValueError) as exc:
        raise Failure("ca", f"the CA file {ca_file} holds no usable certificate: {exc}") from None
    return httpx2.Client(base_url=url, verify=context, trust_env=False)


def bearer_token(path: str) -> str:
    """The service account token, read at each request (the kubelet rotates it); raises :class:`Failure`."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise Failure("token", f"cannot read the token file {path}: {exc}") from None


class WatchStream:
    """Watch requests to one API server (``url``); :meth:`abort` ends the one in progress."""

    def __init__(self, url: str, token_file: str, ca_file: str, timeout_seconds: float) -> None:
        self.url = url
        self._token_file = token_file
        self._ca_file = ca_file
        self._timeout = timeout_seconds
        self._client: Any = None
        self._lock = threading.Lock()
        self._response: Any = None
        self._aborted = False

    def _made(self) -> Any:
        if self._client is None:
            self._client = tls_client(self.url, self._ca_file)
        return self._client

    def _token(self) -> str:
        return bearer_token(self._token_file)

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """One JSON object from ``path`` (a list page), read within :data:`MAX_PAGE_BYTES`
        decompressed and :attr:`_timeout` seconds in all; raises :class:`Failure`."""
        import httpx2

        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        deadline = time.monotonic() + self._timeout
        try:
            with self._made().stream("GET", path, params=params, headers=headers,
                                     timeout=httpx2.Timeout(self._timeout)) as response:  # fmt: skip
                if response.status_code != 200:
                    _refused(response.status_code, body(decoded(response), 65536, "an error answer"))
                data = body(_until(decoded(response), deadline, self._timeout), MAX_PAGE_BYTES, "a list page")
        except httpx2.TimeoutException:
            raise Failure("timeout", f"no answer in {self._timeout:g} s") from None
        except httpx2.ConnectError as exc:
            raise connect_failure(exc) from None
        except httpx2.HTTPError as exc:
            raise Failure("unavailable", f"{type(exc).__name__}: {str(exc)[:200]}") from None
        try:
            page = json.loads(data)
        except ValueError as exc:
            raise Failure("malformed", f"a list page is not JSON: {exc}") from None
        if not isinstance(page, dict):
            raise Failure("malformed", "a list page is not a JSON object")
        return page

    def events(self, path: str, node: str, version: str, seconds: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) of each event on ``node`` after ``version`` until the server ends the watch
        (at most ``seconds`` s, and the request timeout: a server that ignores ``timeoutSeconds`` is
        left then); raises :class:`Gone` or :class:`Failure`."""
        import httpx2

        params = {
            "watch": "1", "allowWatchBookmarks": "true", "resourceVersion": version, "timeoutSeconds": str(seconds),
            "fieldSelector": f"spec.nodeName={node}",
        }  # fmt: skip
        timeout = httpx2.Timeout(self._timeout, read=seconds + self._timeout)
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        client = self._made()
        deadline = time.monotonic() + seconds + self._timeout
        try:
            with client.stream("GET", path, params=params, headers=headers, timeout=timeout) as response:
                with self._lock:
                    if self._aborted:
                        return
                    self._response = response
                if response.status_code != 200:
                    _refused(response.status_code, body(decoded(response), 65536, "an error answer"))
                cut: list[bool] = []
                pieces = _until(decoded(response), deadline, None, cut)
                for line in lines(pieces, MAX_LINE, "a watch event"):
                    if cut:  # our own deadline ended the watch: what is left is an event cut short, not an error
                        return
                    if line.strip():
                        yield _event(line)
        except httpx2.TimeoutException:
            raise Failure("timeout", f"nothing read in {seconds + self._timeout:g} s") from None
        except httpx2.ConnectError as exc:
            raise connect_failure(exc) from None
        except httpx2.HTTPError as exc:
            if self._aborted:
                return
            raise Failure("unavailable", f"the watch stream broke ({type(exc).__name__}: {str(exc)[:200]})") from None
        finally:
            with self._lock:
                self._response = None

    def abort(self) -> None:
        """End the watch in progress (from another thread) and refuse new ones."""
        with self._lock:
            self._aborted = True
            if self._response is not None:
                # closing the response does not wake a thread blocked reading it; shutting its socket does
                network = self._response.extensions.get("network_stream")
                sock = network.get_extra_info("socket") if network is not None else None
                with contextlib.suppress(Exception):  # a socket another thread reads may fail in any way
                    if sock is not None:
                        sock.shutdown(socket.SHUT_RDWR)
                    self._response.close()


def _until(pieces: Iterator[bytes], deadline: float, timeout: float | None, cut: list[bool] | None = None,
           ) -> Iterator[bytes]:  # fmt: skip
    """``pieces`` until ``deadline`` (monotonic): then a list fails (``timeout``), a watch just ends
    (noted in ``cut``)."""
    for piece in pieces:
        yield piece
        if time.monotonic() > deadline:
            if timeout is not None:
                raise Failure("timeout", f"no whole answer in {timeout:g} s")
            if cut is not None:
                cut.append(True)
            return


def status_kind(code: int) -> str:
    """The failure kind of an API server's HTTP status (401/403: no RBAC grant; 404: no such API)."""
    return {401: "unauthorized", 403: "unauthorized", 404: "not_found"}.get(code, "http")


def connect_failure(exc: Exception) -> Failure:
    """The failure of a connection that did not come up: ``tls`` when the server's certificate was
    not verified, else ``unavailable``."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return Failure("tls", str(exc)[:200])
    return Failure("unavailable", str(exc)[:200] or type(exc).__name__)


def _refused(code: int, body: bytes) -> None:
    if code == 410:
        raise Gone("HTTP 410")
    try:
        reason = str(json.loads(body).get("reason", ""))[:100]
    except (ValueError, AttributeError):
        reason = ""
    raise Failure(status_kind(code), f"HTTP {code} {reason}".rstrip())


def _event(line: bytes) -> tuple[str, dict[str, Any]]:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise Failure("malformed", f"a watch line is not JSON: {exc}") from None
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise Failure("malformed", "a watch line is not an event")
    kind, obj = event.get("type"), event["object"]
    if kind == "ERROR":
        code = obj.get("code")
        if code == 410:
            raise Gone(str(obj.get("message", "Gone"))[:200])
        raise Failure("http", f"watch ERROR {code} {str(obj.get('reason', ''))[:100]}".rstrip())
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise Failure("malformed", f"a watch event of type {str(kind)[:40]!r}")
    return kind, obj


def version_of(obj: dict[str, Any]) -> str:
    """``metadata.resourceVersion`` of an object ("" when absent)."""
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return version if isinstance(version, str) else ""


def key_of(obj: dict[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object; raises :class:`Failure` (``malformed``) without a name."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name or not isinstance(metadata, dict):
        raise Failure("malformed", "a watched object has no metadata.name")
    return str(metadata.get("namespace") or ""), name


def apply(objects: dict[tuple[str, str], dict[str, Any]], kind: str, obj: dict[str, Any]) -> bool:
    """Apply one event to ``objects`` (by :func:`key_of`); whether they changed (a bookmark: no).
    Objects added beyond :data:`MAX_OBJECTS` end the watch as a list that long fails (``too_large``):
    the objects held stay as they were."""
    if kind == "BOOKMARK":
        return False
    key = key_of(obj)
    if kind == "DELETED":
        return objects.pop(key, None) is not None
    if key not in objects and len(objects) >= MAX_OBJECTS:
        raise Failure("too_large", f"more than {MAX_OBJECTS} objects after the watch's additions")
    objects[key] = obj
    return True


class Watched(Refresher[S, A]):
    """A :class:`~.refresh.Refresher` that lists (its :meth:`_ask` calls :meth:`_listed` with the
    objects and their version) and then watches from that version on the same thread, publishing
    each change; a subclass says where to watch (:meth:`_watch_path`) and how objects parse (:meth:`_parse`)."""

    _stream: WatchStream
    _node: str
    _objects: dict[tuple[str, str], dict[str, Any]]
    _listed_version: str
    _objects_lock: threading.Lock
    _timer: threading.Timer | None
    _published_at: float

    def _watch_path(self) -> str:
        raise NotImplementedError

    def _parse(self, items: list[dict[str, Any]]) -> A:
        raise NotImplementedError

    def _listed(self, items: list[dict[str, Any]], version: str) -> None:
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for item in items:
            found[key_of(item)] = item
        with self._objects_lock:
            self._objects, self._listed_version = found, version

    def stop(self) -> None:
        """Stop the thread: the watch in progress is ended at once."""
        self._stop.set()
        self._stream.abort()
        with self._objects_lock:
            if self._timer is not None:
                self._timer.cancel()
        super().stop()

    def _changed(self) -> None:
        """Publish the watched objects now, or (within :data:`PUBLISH_EVERY` of the last time) once
        that much time has passed: every publication parses all objects again, so a flood of events
        costs at most a few parses a second, not one each."""
        with self._objects_lock:
            if self._timer is not None:
                return
            wait = self._published_at + PUBLISH_EVERY - time.monotonic()
            if wait > 0:
                self._timer = threading.Timer(wait, self._publish_objects)
                self._timer.daemon = True
                self._timer.start()
                return
        self._publish_objects()

    def _publish_objects(self) -> None:
        with self._objects_lock:
            self._timer = None
            self._published_at = time.monotonic()
            items = list(self._objects.values())
        try:
            answer = self._parse(items)
        except Exception as exc:  # noqa: BLE001 - a bad object must not end the timer thread; the next list decides
            self._log.debug("%s: watched objects not parsed: %s", self._source, exc)
            return
        with self._refreshing:
            state, _ = self._published
            self._published = (self._answered(answer, state.calls, state.failures, time.time()), self._clock())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._objects = {}
        self._listed_version = ""
        self._objects_lock = threading.Lock()
        self._timer = None
        self._published_at = 0.0

    def _run(self) -> None:
        self._watch_logged = ""
        broken = 0  # watches failed in a row
        while not self._stop.is_set():
            began = self._clock()
            self._listed_version = ""
            self.refresh()
            if self._listed_version and not self._stop.is_set():
                if self._watch(self._listed_version):
                    broken = 0
                    continue
                broken += 1  # relist after 1 s, and at the list cadence while watches keep failing (no RBAC)
                self._stop.wait(1.0 if broken == 1 else max(1.0, began + self._refresh - self._clock()))
                continue
            self._stop.wait(max(0.0, began + self._refresh - self._clock()))

    def _watch(self, version: str) -> bool:
        """Watch until the stream ends; whether it ended as the server meant it to (timeout, 410)."""
        seconds = max(1, int(self._refresh))
        try:
            for kind, obj in self._stream.events(self._watch_path(), self._node, version, seconds):
                version = version_of(obj) or version  # a bookmark only moves the version reached
                with self._objects_lock:
                    changed = apply(self._objects, kind, obj)
                if changed:
                    self._changed()
                if self._stop.is_set():
                    return True
        except Gone as gone:
            self._log.debug("%s: watch at version %s gone (%s): listing again", self._source, version, gone)
            return True
        except Failure as failure:
            self._watch_failed(failure.kind, str(failure))
            return False
        except Exception as exc:  # noqa: BLE001 - a watch must not end the thread
            self._watch_failed("error", f"{type(exc).__name__}: {exc}")
            return False
        if self._watch_logged:
            self._log.info("%s: watching %s again", self._source, self._stream.url, extra=LIMITED)
            self._watch_logged = ""
        return True

    def _watch_failed(self, kind: str, detail: str) -> None:
        """Count a failed watch by kind (the listed answer stays up: a list follows) and log a change."""
        if self._watch_logged != kind:  # logged before the count is published, as refresh does
            self._log.warning("%s: watching %s failed (%s: %s); listing again", self._source, self._stream.url,
                              kind, detail)  # fmt: skip
            self._watch_logged = kind
        with self._refreshing:
            self._failures[kind] = self._failures.get(kind, 0) + 1
            state, answered = self._published
            self._published = (self._with(state, failures=tuple(sorted(self._failures.items()))), answered)
