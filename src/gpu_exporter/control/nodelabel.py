"""A pause asked by a label on this Kubernetes node, for automation that needs no exec into the pod (as
NVIDIA's MIG manager drives its components with deploy labels): ``gpu-exporter.io/pause=full`` or
``=profiling`` pauses the exporter on that node (:mod:`gpu_exporter.sampling.pause`) for the duration in
the annotation ``gpu-exporter.io/pause-for`` (``90s``, ``15m``; default 10 minutes, at most 1 hour);
removing the label resumes it. The label is read by ``GET /api/v1/nodes/NODE`` every few seconds
(RBAC: ``get`` on ``nodes``), on a daemon thread; only a change of its value acts, so a pause that
ended on its own while the label stays is not asked again (set the label anew, or another value, to
pause again): a forgotten label cannot blind monitoring either. A value other than the two scopes is
logged once and ignored; the API server not answering is logged once per change and changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from gpu_exporter.sampling.pause import DEFAULT_SECONDS, MAX_SECONDS, SCOPES, Pauses

log = logging.getLogger(__name__)

LABEL = "gpu-exporter.io/pause"
FOR_ANNOTATION = "gpu-exporter.io/pause-for"
#: How often the node is read (seconds).
EVERY_SECONDS = 5.0
SOURCE = f"node label {LABEL}"


class NodeLabelPause:
    """Turns the node's pause label into pauses; ``fetch`` returns the node object (raises on failure),
    ``duration`` parses the annotation's value into seconds (raises ValueError)."""

    def __init__(
        self,
        fetch: Callable[[], Mapping[str, Any]],
        pauses: Pauses,
        duration: Callable[[str], float],
        every: float = EVERY_SECONDS,
    ) -> None:
        self._fetch = fetch
        self._pauses = pauses
        self._duration = duration
        self._every = every
        self._seen: str | None = None
        self._failing: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> None:
        """Read the node once and act on a change of the label."""
        try:
            node = self._fetch()
        except Exception as err:  # noqa: BLE001  (any failure to read the node is logged, changes nothing)
            if str(err) != self._failing:
                log.warning("node pause label: cannot read this node (%s); pausing by label waits for it", err)
                self._failing = str(err)
            return
        if self._failing is not None:
            log.info("node pause label: this node is read again")
            self._failing = None
        metadata = node.get("metadata") if isinstance(node, Mapping) else None
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        value = labels.get(LABEL) if isinstance(labels, Mapping) else None
        value = value if isinstance(value, str) and value else None
        if value == self._seen:
            return
        self._seen = value
        if value is None:
            current = self._pauses.current()
            if current is not None and current.source.startswith(SOURCE):
                self._pauses.resume()
                log.info("node pause label removed: the pause ends now")
            return
        if value not in SCOPES:
            log.warning("node pause label %s=%r is not one of %s: ignored", LABEL, value, ", ".join(SCOPES))
            return
        seconds = DEFAULT_SECONDS
        given = annotations.get(FOR_ANNOTATION) if isinstance(annotations, Mapping) else None
        if isinstance(given, str) and given:
            try:
                seconds = self._duration(given)
            except ValueError as err:
                log.warning("node annotation %s=%r: use %s; pausing for the default %gs", FOR_ANNOTATION, given, err,
                            DEFAULT_SECONDS)  # fmt: skip
        pause = self._pauses.request(value, min(seconds, MAX_SECONDS), f"{SOURCE}={value}")
        log.info("node pause label: %s", pause.describe())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-pause-label", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self._every)
