"""This Kubernetes node's labels and annotations, read by ``GET /api/v1/nodes/NODE`` every few seconds
(RBAC: ``get`` on ``nodes``) on one daemon thread, and handed to each reader that needs them: the pause
label here and the expected GPU count (:mod:`gpu_exporter.sampling.inventory`). One reader of the node for
all of them; the API server not answering is logged once per change, counted in the self-metrics (source
``kubernetes_node``), and changes nothing (each reader keeps what it last saw).

The pause is asked by a label, for automation that needs no exec into the pod (as NVIDIA's MIG manager
drives its components with deploy labels): ``gpu-exporter.io/pause=full`` or ``=profiling`` pauses the
exporter on that node (:mod:`gpu_exporter.sampling.pause`) for the duration in the annotation
``gpu-exporter.io/pause-for`` (``90s``, ``15m``; default 10 minutes, at most 1 hour); removing the label
resumes it. Only a change of its value acts, so a pause that ended on its own while the label stays is
not asked again (set the label anew, or another value, to pause again): a forgotten label cannot blind
monitoring either. A value other than the two scopes is logged once and ignored (counted as
``invalid_label``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_exporter.sampling.pause import DEFAULT_SECONDS, MAX_SECONDS, SCOPES, Pauses

log = logging.getLogger(__name__)

LABEL = "gpu-exporter.io/pause"
FOR_ANNOTATION = "gpu-exporter.io/pause-for"
#: How often the node is read (seconds).
EVERY_SECONDS = 5.0
SOURCE = f"node label {LABEL}"

#: One reader of the node: given its labels and annotations, answers a failure kind to count (a value it
#: could not use) or None.
LabelReader = Callable[[Mapping[str, str], Mapping[str, str]], str | None]


@dataclass(frozen=True)
class NodeLabelsState:
    """For self-metrics (as the attribution sources' states): whether the last read succeeded, reads
    made, failures by kind (failed reads, and label values a reader could not use), the Unix time of the
    last good read."""

    up: bool = False
    calls: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    fetched_at: float = 0.0
    kept: bool = False


class NodeLabels:
    """Reads the node every ``every`` seconds and hands its labels and annotations to ``readers``;
    ``fetch`` returns the node object (raises on failure)."""

    def __init__(
        self,
        fetch: Callable[[], Mapping[str, Any]],
        readers: Sequence[LabelReader],
        every: float = EVERY_SECONDS,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self._readers = tuple(readers)
        self._every = every
        self._wall = wall
        self._failing: str | None = None
        self._failures: dict[str, int] = {}
        self._state = NodeLabelsState()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> NodeLabelsState:
        return self._state

    def check(self) -> None:
        """Read the node once and hand what it carries to every reader."""
        calls = self._state.calls + 1
        try:
            node = self._fetch()
        except Exception as err:  # noqa: BLE001  (any failure to read the node is logged, changes nothing)
            kind = getattr(err, "kind", "error")
            self._count(kind if isinstance(kind, str) else "error")
            if str(err) != self._failing:
                log.warning("node labels: cannot read this node (%s); what its labels ask waits for it", err)
                self._failing = str(err)
            self._state = NodeLabelsState(False, calls, self._counted(), self._state.fetched_at)
            return
        if self._failing is not None:
            log.info("node labels: this node is read again")
            self._failing = None
        metadata = node.get("metadata") if isinstance(node, Mapping) else None
        labels = _strings(metadata.get("labels") if isinstance(metadata, Mapping) else None)
        annotations = _strings(metadata.get("annotations") if isinstance(metadata, Mapping) else None)
        for reader in self._readers:
            kind = reader(labels, annotations)
            if kind is not None:
                self._count(kind)
        self._state = NodeLabelsState(True, calls, self._counted(), self._wall())

    def _count(self, kind: str) -> None:
        self._failures[kind] = self._failures.get(kind, 0) + 1

    def _counted(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self._failures.items()))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-labels", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self._every)


def _strings(given: object) -> dict[str, str]:
    """A node's labels or annotations (string to string; anything else left out)."""
    if not isinstance(given, Mapping):
        return {}
    return {k: v for k, v in given.items() if isinstance(k, str) and isinstance(v, str)}


class NodeLabelPause:
    """Turns the node's pause label into pauses (a :data:`LabelReader`); ``duration`` parses the
    annotation's value into seconds (raises ValueError)."""

    def __init__(self, pauses: Pauses, duration: Callable[[str], float]) -> None:
        self._pauses = pauses
        self._duration = duration
        self._seen: str | None = None

    def __call__(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
        """Act on a change of the label; ``"invalid_label"`` for a new value that is no scope."""
        value = labels.get(LABEL) or None
        if value == self._seen:
            return None
        self._seen = value
        if value is None:
            current = self._pauses.current()
            if current is not None and current.source.startswith(SOURCE):
                self._pauses.resume()
                log.info("node pause label removed: the pause ends now")
            return None
        if value not in SCOPES:
            log.warning("node pause label %s=%r is not one of %s: ignored", LABEL, value, ", ".join(SCOPES))
            return "invalid_label"
        seconds = DEFAULT_SECONDS
        given = annotations.get(FOR_ANNOTATION)
        if given:
            try:
                seconds = self._duration(given)
            except ValueError as err:
                log.warning("node annotation %s=%r: use %s; pausing for the default %gs", FOR_ANNOTATION, given, err,
                            DEFAULT_SECONDS)  # fmt: skip
        pause = self._pauses.request(value, min(seconds, MAX_SECONDS), f"{SOURCE}={value}")
        log.info("node pause label: %s", pause.describe())
        return None
