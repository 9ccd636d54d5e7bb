"""This node's GPU health as a condition on its Node object (``--kubernetes.node-condition TYPE``), for
clusters without Node Problem Detector: the exporter patches the condition itself through the API
server, as NPD would.

The condition is ``True`` while every GPU the node should have is healthy (nothing to do), ``False``
when one needs action (the reason, CamelCase, says which: ``GPUResetNeeded``, ``GPUNodeRebootNeeded``,
...; the message names each GPU, its problem and its action, worst first), ``Unknown`` while the
exporter cannot judge (backend down, starting). A daemon thread of its own looks at the newest
snapshot's health every :data:`LOOK_SECONDS`, so sampling never waits on the API server, and sends

    PATCH /api/v1/nodes/NODE/status   (application/strategic-merge-patch+json)
    {"status": {"conditions": [{"type", "status", "reason", "message", "lastHeartbeatTime",
                                "lastTransitionTime"}]}}

when the condition changes and otherwise once per :data:`HEARTBEAT_SECONDS` (the heartbeat).
``lastTransitionTime`` moves only when the status changes: the first patch after a start keeps the
one the node already has when the status is the same (one ``GET /api/v1/nodes/NODE`` before it).
A refused or failed request is retried with a growing backoff (1 s to 5 min), counted by kind in the
self-metrics (source ``kubernetes_node_condition``) and logged once per change of state.

With ``--kubernetes.node-condition-events``, each change to ``True`` or ``False`` is also told as one
Kubernetes Event involving the Node (:mod:`.nodeevents`).

RBAC: ``get`` on ``nodes`` and ``patch`` on ``nodes/status`` (and ``create`` on ``events`` for the
Events). Kubernetes cannot narrow a DaemonSet's grant to each pod's own node; the exporter only ever
writes its own node's one condition type.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.attribution.bounded import body as read_bounded
from gpu_exporter.attribution.bounded import decoded
from gpu_exporter.attribution.kubewatch import bearer_token, connect_failure, status_kind, tls_client
from gpu_exporter.attribution.nodeevents import TYPES, NodeEvents
from gpu_exporter.attribution.refresh import Failure
from gpu_exporter.sampling.health import FAIL, Health

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 300.0
LOOK_SECONDS = 1.0
BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
MAX_MESSAGE = 1024  # characters of the condition's message
MAX_ANSWER = 4 * 1024 * 1024  # bytes of a Node object read
#: The condition's reason by the node's recommended action.
REASONS = {
    "none": "GPUUnhealthy", "restart_job": "GPUJobRestartNeeded", "drain": "GPUDrainNeeded",
    "reset_gpu": "GPUResetNeeded", "reboot": "GPUNodeRebootNeeded", "service": "GPUServiceNeeded",
}  # fmt: skip


@dataclass(frozen=True)
class Wanted:
    """The condition the health asks for: status (``True``, ``False``, ``Unknown``), reason, message."""

    status: str
    reason: str
    message: str


def wanted(health: Health) -> Wanted:
    """The condition of ``health``: ``True`` (healthy) unless a GPU needs action or one is missing."""
    if not health.known:
        return Wanted("Unknown", "GPUHealthUnknown", "gpu-exporter has not judged the GPUs (backend down or starting)")
    problems = health.problems()
    if health.status == FAIL or health.action != "none":
        message = "; ".join(problems) or f"GPU health {health.action}"
        return Wanted("False", REASONS[health.action], message[:MAX_MESSAGE])
    gpus = "1 GPU" if health.present == 1 else f"{health.present} GPUs"
    text = f"{gpus} healthy" + (f"; warnings: {'; '.join(problems)}" if problems else "")
    return Wanted("True", "GPUsHealthy", text[:MAX_MESSAGE])


def _timestamp(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


@dataclass(frozen=True)
class NodeConditionState:
    """For self-metrics: whether the last request succeeded, requests made, failures by kind, the
    Unix time of the last good patch (as the other API sources' states)."""

    up: bool = False
    calls: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    fetched_at: float = 0.0
    kept: bool = False
    patches: int = 0


@dataclass
class _Known:
    """What the node has now, as far as this exporter knows (None: not read yet)."""

    status: str | None = None
    transition: str = ""
    sent: Wanted | None = None
    sent_at: float = 0.0  # monotonic
    decided: str | None = None  # the last True or False the node had (None: never, as far as known)
    failures: dict[str, int] = field(default_factory=dict)


class NodeCondition:
    """Keeps condition ``type_`` of node ``node`` in step with ``health()``, on its own daemon thread."""

    def __init__(
        self, url: str, token_file: str, ca_file: str, node: str, type_: str, health: Callable[[], Health], *,
        timeout_seconds: float = 5.0, heartbeat_seconds: float = HEARTBEAT_SECONDS, events: bool = False,
        clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        """``events``: also create one Event on each transition to True or False (:mod:`.nodeevents`)."""
        self._url, self._token_file, self._ca_file = url, token_file, ca_file
        self._node, self._type, self._health = node, type_, health
        self._timeout, self._heartbeat = timeout_seconds, heartbeat_seconds
        self._clock, self._wall = clock, wall
        self._known = _Known()
        self._state = NodeConditionState()
        self._retry_at = 0.0
        self._backoff = 0
        self._client: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events = NodeEvents(node, type_, self._send, BACKOFF_SECONDS) if events else None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-condition", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._timeout + 1.0)

    def current(self) -> NodeConditionState:
        return self._state

    def _run(self) -> None:
        while not self._stop.wait(LOOK_SECONDS):
            self.step()

    def step(self) -> None:
        """One look: patch when the condition changed or the heartbeat is due, unless backing off; then
        create a transition's Event where one waits (on a backoff of its own)."""
        now = self._clock()
        if now >= self._retry_at:
            self._condition(now)
        if self.events is not None:
            self.events.flush(now, self._wall())

    def _condition(self, now: float) -> None:
        want = wanted(self._health())
        known = self._known
        if known.sent == want and now - known.sent_at < self._heartbeat:
            return
        try:
            if known.status is None:
                known.status, known.transition = self._read()
                known.decided = known.status if known.status in TYPES else None
            wall = _timestamp(self._wall())
            transition = known.transition if known.status == want.status and known.transition else wall
            self._patch(want, wall, transition)
        except Failure as failure:
            self._failed(failure, now)
            return
        if known.sent is None or known.sent.status != want.status:
            log.info("node %s: condition %s=%s (%s): %s", self._node, self._type, want.status, want.reason,
                     want.message)  # fmt: skip
        if not self._state.up and self._state.calls:
            log.info("node %s: the API server accepts the %s condition again", self._node, self._type)
        if want.status in TYPES and want.status != known.decided:
            if self.events is not None:
                self.events.transition(want.status, want.reason, want.message, self._wall())
            known.decided = want.status
        known.status, known.transition, known.sent, known.sent_at = want.status, transition, want, now
        self._backoff = 0
        state = self._state
        self._state = NodeConditionState(True, state.calls, state.failures, self._wall(), False, state.patches + 1)

    def _failed(self, failure: Failure, now: float) -> None:
        known = self._known
        known.failures[failure.kind] = known.failures.get(failure.kind, 0) + 1
        delay = BACKOFF_SECONDS[min(self._backoff, len(BACKOFF_SECONDS) - 1)]
        self._backoff += 1
        self._retry_at = now + delay
        if self._state.up or self._state.calls <= 1:
            log.warning("node %s: cannot set the %s condition (%s: %s); retrying with backoff up to %g s",
                        self._node, self._type, failure.kind, failure, BACKOFF_SECONDS[-1])  # fmt: skip
        state = self._state
        self._state = NodeConditionState(False, state.calls, tuple(sorted(known.failures.items())), state.fetched_at,
                                         False, state.patches)  # fmt: skip

    def _request(self, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
        """One request of the condition (counted in its state); the JSON object answered, or :class:`Failure`."""
        self._state = NodeConditionState(self._state.up, self._state.calls + 1, self._state.failures,
                                         self._state.fetched_at, False, self._state.patches)  # fmt: skip
        return self._send(method, path, body, (200,))

    def _send(self, method: str, path: str, body: bytes | None, accepted: tuple[int, ...]) -> dict[str, Any]:
        """One request to the API server (a PATCH is a strategic merge patch, a POST JSON); the JSON object
        answered with one of the ``accepted`` statuses, or :class:`Failure`."""
        import httpx2

        token = bearer_token(self._token_file)
        if self._client is None:
            self._client = tls_client(self._url, self._ca_file)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if body is not None:
            patch = method == "PATCH"
            headers["Content-Type"] = "application/strategic-merge-patch+json" if patch else "application/json"
        what = f"the answer to {method} {path}"
        try:  # read as it arrives and refused past MAX_ANSWER, never buffered whole first
            with self._client.stream(method, path, content=body, headers=headers,
                                     timeout=httpx2.Timeout(self._timeout)) as response:  # fmt: skip
                if response.status_code not in accepted:
                    raise Failure(status_kind(response.status_code), f"HTTP {response.status_code} on {method} {path}")
                content = read_bounded(decoded(response), MAX_ANSWER, what)
        except httpx2.TimeoutException:
            raise Failure("timeout", f"no answer in {self._timeout:g} s") from None
        except httpx2.ConnectError as exc:
            raise connect_failure(exc) from None
        except httpx2.HTTPError as exc:
            raise Failure("unavailable", f"{type(exc).__name__}: {str(exc)[:200]}") from None
        try:
            answer = json.loads(content)
        except ValueError as exc:
            raise Failure("malformed", f"{what} is not JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise Failure("malformed", f"the answer to {method} {path} is not an object")
        return answer

    def _read(self) -> tuple[str, str]:
        """The node's current status and lastTransitionTime of the condition ("" where it has none)."""
        node = self._request("GET", f"/api/v1/nodes/{self._node}")
        conditions = (node.get("status") or {}).get("conditions") or []
        for condition in conditions if isinstance(conditions, list) else ():
            if isinstance(condition, dict) and condition.get("type") == self._type:
                return str(condition.get("status", "")), str(condition.get("lastTransitionTime", ""))
        return "", ""

    def _patch(self, want: Wanted, heartbeat: str, transition: str) -> None:
        condition = {
            "type": self._type, "status": want.status, "reason": want.reason, "message": want.message,
            "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition,
        }  # fmt: skip
        body = json.dumps({"status": {"conditions": [condition]}}).encode()
        self._request("PATCH", f"/api/v1/nodes/{self._node}/status", body)
