"""Names for pod UIDs: the kubelet's own HTTPS API (``GET /pods``), asked on a cadence of its own.

A process's cgroups give its pod UID and container ID (:mod:`.cgroups`); the pod-resources API names
pods but carries no UIDs. The kubelet's ``/pods`` endpoint (port 10250) answers a ``v1.PodList``
(JSON) of the pods it runs, static pods included under the UID the kubelet uses in cgroup paths.
From each item it keeps ``metadata.uid``, ``metadata.namespace``, ``metadata.name`` and, from
``status.containerStatuses``, ``status.initContainerStatuses`` and
``status.ephemeralContainerStatuses``, each ``containerID`` (``containerd://<64 hex>``,
``cri-o://…``, ``docker://…``; the runtime prefix is stripped, ids that are not 64 hex digits are
skipped) with its container ``name``.

A daemon thread makes one request every ``refresh_seconds`` (never per scrape) and publishes an
immutable :class:`KubeletPodsState` that :meth:`KubeletPods.current` hands out without blocking.
Each request opens a fresh connection, authenticates with the service-account bearer token (the
file is read again on every request, so a rotated token is used at the next refresh) and verifies
the kubelet's certificate against ``ca_file`` (re-loaded when the file changes), unless
``insecure_skip_verify`` is set: that sends the token to whatever answers on the address and is
meant only for kubelets whose self-signed serving certificate no CA vouches for. The kubelet
authorizes ``/pods`` as ``get`` on ``nodes/proxy`` (``nodes/pods`` where fine-grained kubelet
authorization is enabled), so the service account needs that RBAC grant.

The whole request (connect, headers and body) is bounded by ``timeout_seconds`` and the body by
``max_bytes``. A failure (by kind, :data:`FAILURE_KINDS`) is counted, keeps the last good answer for
``max_age_seconds`` and then drops it; nothing is ever raised to the caller. One log line is written
per change of state (answering, failing with another kind, answer dropped, answering again); the
token is never logged.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpu_exporter.attribution.refresh import Failure, Refresher

log = logging.getLogger(__name__)

URL = "https://127.0.0.1:10250/pods"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_FILE = f"{SERVICE_ACCOUNT}/token"
CA_FILE = f"{SERVICE_ACCOUNT}/ca.crt"
MAX_BYTES = 16 * 1024 * 1024
MAX_NAME = 1024
MAX_TOKEN_BYTES = 64 * 1024
#: ``token``: the token file is missing, unreadable or empty; ``ca``: the CA file is missing or holds
#: no certificate; ``tls``: the handshake failed (certificate not verified, wrong name, not TLS);
#: ``unavailable``: nothing answers (refused, reset, closed early, in the handshake too);
#: ``timeout``: no whole answer within the timeout; ``unauthorized``: HTTP 401 or 403;
#: ``http``: any other status than 200;
#: ``too_large``: a body over ``max_bytes``; ``malformed``: not a PodList; ``error``: anything else.
FAILURE_KINDS = (
    "token",
    "ca",
    "tls",
    "unavailable",
    "timeout",
    "unauthorized",
    "http",
    "too_large",
    "malformed",
    "error",
)

_CONTAINER_ID = re.compile(r"(?:[a-z0-9.+-]+://)?([0-9a-fA-F]{64})")
_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
_EMPTY: Mapping[str, PodName] = MappingProxyType({})


@dataclass(frozen=True)
class PodName:
    """One pod the kubelet runs."""

    namespace: str
    pod: str
    containers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # container id → name
    uid: str = field(default="", compare=False)  # metadata.uid (lower case)
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), compare=False)  # metadata.labels


@dataclass(frozen=True)
class KubeletPodsState:
    """What the kubelet last said, and how asking it has gone."""

    #: by pod UID (lower case); empty before any answer and once dropped
    pods: Mapping[str, PodName] = field(default_factory=lambda: _EMPTY)
    up: bool = False  # the last request got a good answer
    calls: int = 0  # requests sent to the kubelet
    failures: tuple[tuple[str, int], ...] = ()  # (kind, count) for each kind seen, by kind
    fetched_at: float = 0.0  # Unix time (seconds) of the last good answer; 0.0 before any
    error: str = ""  # kind of the last failure (one of FAILURE_KINDS); "" after a good answer
    kept: bool = False  # pods are an earlier answer, kept through failures


_Failure = Failure


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Failure("malformed", f"{what} is not a non-empty string")
    if len(value) > MAX_NAME:
        raise _Failure("malformed", f"{what} is longer than {MAX_NAME} characters")
    return value


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Failure("malformed", f"{what} is not an object")
    return value


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Failure("malformed", f"{what} is not a list")
    return value


def container_id(value: str) -> str:
    """The 64-hex-digit id in a ``containerID`` (``containerd://…``, ``cri-o://…``, ``docker://…``),
    in lower case; "" when it holds none (a container not started yet, another id form)."""
    match = _CONTAINER_ID.fullmatch(value)
    return match.group(1).lower() if match else ""


def parse(body: bytes) -> Mapping[str, PodName]:
    """The pods in a ``/pods`` answer, by UID; raises ``_Failure`` when refused whole."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _Failure("malformed", f"answer is not JSON: {str(exc)[:200]}") from None
    return pods_of(_list(_object(document, "the answer").get("items"), "items"))


#: The annotation of a static pod's mirror in the API server: the UID the kubelet runs it under (in cgroups).
MIRROR = "kubernetes.io/config.mirror"


def pods_of(items: list[Any]) -> Mapping[str, PodName]:
    """The ``v1.Pod`` objects (as JSON) of a pod list, by UID; a mirror pod (a static pod as the API
    server shows it) also by the kubelet's UID in its ``kubernetes.io/config.mirror`` annotation."""
    pods: dict[str, PodName] = {}
    for index, item in enumerate(items):
        where = f"items[{index}]"
        metadata = _object(_object(item, where).get("metadata"), f"{where}.metadata")
        uid = _text(metadata.get("uid"), f"{where}.metadata.uid").lower()
        namespace = _text(metadata.get("namespace"), f"{where}.metadata.namespace")
        name = _text(metadata.get("name"), f"{where}.metadata.name")
        status = item.get("status")
        status = {} if status is None else _object(status, f"{where}.status")
        containers: dict[str, str] = {}
        for key in _STATUS_LISTS:
            for number, each in enumerate(_list(status.get(key), f"{where}.status.{key}")):
                entry = _object(each, f"{where}.status.{key}[{number}]")
                raw = entry.get("containerID") or ""
                if not isinstance(raw, str):
                    raise _Failure("malformed", f"{where}.status.{key}[{number}].containerID is not a string")
                found = container_id(raw)
                if found:
                    containers[found] = _text(entry.get("name"), f"{where}.status.{key}[{number}].name")
        raw_labels = metadata.get("labels") or {}
        labels = {str(k): v for k, v in _object(raw_labels, f"{where}.metadata.labels").items() if isinstance(v, str)}
        named = PodName(namespace, name, MappingProxyType(containers), uid, MappingProxyType(labels))
        pods[uid] = named
        mirror = (
            (metadata.get("annotations") or {}).get(MIRROR) if isinstance(metadata.get("annotations"), dict) else ""
        )
        if isinstance(mirror, str) and 0 < len(mirror) <= MAX_NAME:
            pods.setdefault(mirror.lower(), named)
    return MappingProxyType(pods)


class KubeletPods(Refresher[KubeletPodsState, Mapping[str, PodName]]):
    """Pod names by UID from the kubelet's ``/pods``, refreshed on a daemon thread and read without blocking."""

    def __init__(
        self,
        url: str = URL,
        token_file: str = TOKEN_FILE,
        ca_file: str = CA_FILE,
        refresh_seconds: float = 30.0,
        max_age_seconds: float = 180.0,
        timeout_seconds: float = 5.0,
        max_bytes: int = MAX_BYTES,
        *,
        insecure_skip_verify: bool = False,
    ) -> None:
        """``url``: an ``https://`` URL (raises ``ValueError`` otherwise, before anything starts);
        ``token_file``: "" sends no token; ``insecure_skip_verify``: do not verify the kubelet's
        certificate (``ca_file`` is then not read)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"kubelet URL {url!r}: expected https://HOST[:PORT]/PATH")
        self._url = url
        self._host = parts.hostname
        self._port = parts.port or 10250
        self._path = (parts.path or "/pods") + (f"?{parts.query}" if parts.query else "")
        self._token_file = token_file
        self._ca_file = ca_file
        self._insecure = insecure_skip_verify
        self._max_bytes = max_bytes
        self._context: tuple[object, ssl.SSLContext] | None = None  # (CA file's stat key, its context)
        super().__init__(
            log, "kubelet pods", "pods", _EMPTY, KubeletPodsState(), refresh_seconds, max_age_seconds, timeout_seconds
        )
        self._credentials: tuple[str, ssl.SSLContext] | None = None  # for the request _prepare checked

    def _prepare(self) -> None:
        self._credentials = (self._token(), self._ssl_context())

    def _ask(self) -> Mapping[str, PodName]:
        assert self._credentials is not None
        return parse(self._get(*self._credentials))

    def _answered(
        self, answer: Mapping[str, PodName], calls: int, failures: tuple[tuple[str, int], ...], fetched_at: float
    ) -> KubeletPodsState:
        return KubeletPodsState(answer, True, calls, failures, fetched_at)

    def _what(self) -> str:
        return f"GET {self._url}"

    def _up_line(self, answer: Mapping[str, PodName], again: str) -> str:
        return f"kubelet pods: {self._url} answers{again} ({len(answer)} pods)"

    def _token(self) -> str:
        if not self._token_file:
            return ""
        try:
            with open(self._token_file, "rb") as file:
                token = file.read(MAX_TOKEN_BYTES + 1)
        except OSError as exc:
            raise _Failure("token", f"cannot read the token file {self._token_file}: {exc.strerror}") from None
        text = token.decode("ascii", "replace").strip()
        if not text or len(token) > MAX_TOKEN_BYTES or any(c.isspace() or not c.isprintable() for c in text):
            raise _Failure("token", f"the token file {self._token_file} holds no usable token")
        return text

    def _ssl_context(self) -> ssl.SSLContext:
        if self._insecure:
            if self._context is None:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                self._context = (None, context)
            return self._context[1]
        try:
            stat = os.stat(self._ca_file)
        except OSError as exc:
            raise _Failure("ca", f"cannot read the CA file {self._ca_file}: {exc.strerror}") from None
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._context is None or self._context[0] != key:
            try:
                self._context = (key, ssl.create_default_context(cafile=self._ca_file))
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise _Failure("ca", f"the CA file {self._ca_file} holds no usable certificate: {exc}") from None
        return self._context[1]

    def _get(self, token: str, context: ssl.SSLContext) -> bytes:
        deadline = self._clock() + self._timeout
        connection = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=context)
        headers = {"Accept": "application/json", "User-Agent": "gpu-exporter"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            connection.request("GET", self._path, headers=headers)
            response = connection.getresponse()
            if response.status in (401, 403):
                raise _Failure("unauthorized", f"HTTP {response.status} {response.reason}")
            if response.status != 200:
                raise _Failure("http", f"HTTP {response.status} {response.reason}")
            length = response.getheader("Content-Length", "")
            if length.isascii() and length.isdigit() and int(length) > self._max_bytes:
                raise _Failure("too_large", f"Content-Length {length} is over {self._max_bytes} bytes")
            chunks: list[bytes] = []
            size = 0
            while chunk := response.read1(65536):
                size += len(chunk)
                if size > self._max_bytes:
                    raise _Failure("too_large", f"answer is over {self._max_bytes} bytes")
                if self._clock() > deadline:
                    raise _Failure("timeout", f"no whole answer in {self._timeout:g} s")
                chunks.append(chunk)
            return b"".join(chunks)
        except TimeoutError:
            raise _Failure("timeout", f"no answer in {self._timeout:g} s") from None
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:  # closed during the handshake: a kubelet going away
            raise _Failure("unavailable", f"connection closed ({exc.reason or exc})") from None
        except ssl.SSLError as exc:
            raise _Failure("tls", getattr(exc, "verify_message", "") or str(exc.reason or exc)) from None
        except OSError as exc:
            raise _Failure("unavailable", f"{type(exc).__name__}: {exc.strerror or exc}") from None
        except http.client.HTTPException as exc:
            raise _Failure("malformed", f"not an HTTP answer ({type(exc).__name__})") from None
        finally:
            connection.close()
