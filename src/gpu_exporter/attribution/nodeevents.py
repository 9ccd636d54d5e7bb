"""One Kubernetes Event on each transition of the node condition (``--kubernetes.node-condition-events``):
when :mod:`.nodecondition` has set the condition to ``True`` or ``False`` and the node last had another
status (or none: the first time it is set), one Event involving the Node says so, as the kubelet's and
Node Problem Detector's node events do. ``Unknown`` (the exporter cannot judge: starting, backend down)
makes none, so an exporter's restart (``True`` → ``Unknown`` → ``True``) is no transition.

The Event is core/v1 (``POST /api/v1/namespaces/default/events``), the API ``kubectl describe node``
lists its events from (events.k8s.io/v1 Events are the same objects seen through another version; the
core/v1 form carries ``firstTimestamp``, ``lastTimestamp`` and ``count``, which older kubectl releases
need for the Age column). It is written as the kubelet writes its node events: in namespace ``default``
(an object without a namespace may have its events only there, or in none, by the API server's
validation of core/v1 Events), ``involvedObject`` the Node with its *name* as ``uid`` (the kubelet's node
reference does so, and kubectl's node describer looks events up by that uid), ``source.component`` and
``reportingComponent`` ``gpu-exporter``, ``type`` Warning for ``False`` and Normal for ``True``, the
condition's reason (CamelCase) and a message naming the GPUs and actions.

Each transition's Event has its own name (the node's, a dot, the transition's time in nanoseconds,
hexadecimal), so a retry after an answer that was lost is refused as AlreadyExists (409) instead of
making a second Event: at most one per transition. A refused or failed creation is counted by kind in the
self-metrics (source ``kubernetes_node_events``), logged once per change of state, and retried with the
node condition's backoff, on the node condition's thread but on a clock of its own: it never holds back
the condition or sampling. A newer transition replaces an Event not yet created (the older is logged and
dropped): the node's latest transition is the one worth telling.

RBAC: ``create`` on ``events`` (in namespace ``default``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gpu_exporter.attribution.refresh import Failure

log = logging.getLogger(__name__)

NAMESPACE = "default"
COMPONENT = "gpu-exporter"
MAX_MESSAGE = 1024  # characters (the API server's limit of an Event's note)
MAX_INSTANCE = 128  # characters of reportingInstance
#: The Event's type by the condition's new status.
TYPES = {"True": "Normal", "False": "Warning"}

#: Sends one request (method, path, JSON body) and answers the object the API server returned, or
#: raises :class:`~gpu_exporter.attribution.refresh.Failure`; the statuses it accepts are given.
Send = Callable[[str, str, bytes, tuple[int, ...]], dict[str, Any]]


@dataclass(frozen=True)
class NodeEventsState:
    """For self-metrics: whether the last creation succeeded, requests made, failures by kind, the Unix
    time of the last Event created; ``created`` Events created, ``dropped`` replaced before creation."""

    up: bool = False
    calls: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    fetched_at: float = 0.0
    kept: bool = False
    created: int = 0
    dropped: int = 0


def _timestamp(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


class NodeEvents:
    """The Events of condition ``type_`` of node ``node``: :meth:`transition` queues one, :meth:`flush`
    creates it when its backoff allows (both on the node condition's thread)."""

    def __init__(self, node: str, type_: str, send: Send, backoff: tuple[float, ...]) -> None:
        self._node, self._type, self._send, self._backoff_seconds = node, type_, send, backoff
        self._pending: tuple[str, str, bytes] | None = None  # (name, reason, body)
        self._retry_at = 0.0
        self._backoff = 0
        self._failures: dict[str, int] = {}
        self._state = NodeEventsState()

    def current(self) -> NodeEventsState:
        return self._state

    def transition(self, status: str, reason: str, message: str, wall: float) -> None:
        """The condition was set to ``status`` (``True``/``False``) at Unix time ``wall``: one Event to create."""
        if self._pending is not None:
            log.info("node %s: the Event %s was not created before the next transition: dropped", self._node,
                     self._pending[1])  # fmt: skip
            self._state = replace(self._state, dropped=self._state.dropped + 1)
        name = f"{self._node[:200]}.{int(wall * 1e9):x}"
        stamp = _timestamp(wall)
        event = {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self._node, "uid": self._node},
            "reason": reason, "message": f"{self._type} is {status}: {message}"[:MAX_MESSAGE],
            "type": TYPES[status], "source": {"component": COMPONENT, "host": self._node},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": COMPONENT, "reportingInstance": self._node[:MAX_INSTANCE],
        }  # fmt: skip
        self._pending = (name, reason, json.dumps(event).encode())
        self._retry_at = 0.0  # a new transition is tried at once, whatever the last one's backoff
        self._backoff = 0

    def flush(self, now: float, wall: float) -> None:
        """Create the pending Event, unless there is none or its backoff runs (``now`` monotonic)."""
        if self._pending is None or now < self._retry_at:
            return
        name, reason, body = self._pending
        state = self._state
        try:
            self._send("POST", f"/api/v1/namespaces/{NAMESPACE}/events", body, (200, 201, 409))
        except Failure as failure:
            self._failures[failure.kind] = self._failures.get(failure.kind, 0) + 1
            delay = self._backoff_seconds[min(self._backoff, len(self._backoff_seconds) - 1)]
            self._backoff += 1
            self._retry_at = now + delay
            if state.up or state.calls == 0:
                log.warning("node %s: cannot create the Event %s (%s: %s); retrying with backoff up to %g s",
                            self._node, reason, failure.kind, failure, self._backoff_seconds[-1])  # fmt: skip
            failures = tuple(sorted(self._failures.items()))
            self._state = replace(state, up=False, calls=state.calls + 1, failures=failures)
            return
        if not state.up and state.calls:
            log.info("node %s: the API server accepts Events again", self._node)
        log.debug("node %s: Event %s (%s) created", self._node, name, reason)
        self._pending, self._backoff = None, 0
        self._state = replace(state, up=True, calls=state.calls + 1, fetched_at=wall, created=state.created + 1)
