"""The expected inventory: how many GPUs this node should have, so that a GPU missing since boot (never
enumerated) or one the driver stopped listing is as visible as one that fell off at run time.

Two sources, the first that says a number wins: ``--expected-gpus N`` (its environment variable, its
YAML key), fixed for the process's life; else, on Kubernetes, a label on this node
(``--kubernetes.expected-gpus-label``, e.g. ``gpu-exporter.io/expected-gpus=8``) as the node reader of
:mod:`gpu_exporter.control.nodelabel` last saw it, so relabelling the node takes effect within that
reader's period, without a restart. The label's value is a plain non-negative integer (``0``: expect
whatever the driver lists, as the flag's 0); any other value is logged once per value, counted (the
node reader's source, kind ``invalid_label``), and ignored (the node then has no label-given
inventory); a removed label takes its inventory away.

Read by the health model once per cycle on the sampler's thread, written by the node reader's thread:
each side reads or replaces one reference, so no lock is needed.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: The most GPUs a label may ask for (as ``--expected-gpus``).
MAX_GPUS = 1024
#: The label suggested for it (the manifests' overlay sets it); any label name may be configured.
DEFAULT_LABEL = "gpu-exporter.io/expected-gpus"


class ExpectedGpus:
    """The inventory now: ``fixed`` from the flag (None or 0: not set), else the label's last value."""

    def __init__(self, fixed: int | None = None, label: str = "") -> None:
        self._fixed = fixed or None
        self._label = label
        self._from_label: int | None = None
        self._seen: str | None = None

    def current(self) -> int | None:
        """The GPUs this node should have; None where nothing says (no inventory)."""
        return self._fixed if self._fixed is not None else self._from_label

    def label_seen(self, value: str | None) -> str | None:
        """The node reader's latest value of the label (None: the node has no such label); answers
        ``"invalid_label"`` for a new value that is not a count (for the reader to count), else None."""
        if value == self._seen:
            return None
        self._seen = value
        if self._fixed is not None:
            log.info("node label %s=%r ignored: --expected-gpus %d wins over it", self._label, value, self._fixed)
            return None
        if value is None:
            if self._from_label is not None:
                log.info("node label %s removed: no expected GPU count any more", self._label)
            self._from_label = None
            return None
        count = _count(value)
        if count is None:
            self._from_label = None
            log.warning("node label %s=%r is not a whole number from 0 to %d: ignored, no expected GPU count",
                        self._label, value[:80], MAX_GPUS)  # fmt: skip
            return "invalid_label"
        self._from_label = count or None
        log.info("node label %s=%s: this node should have %s", self._label, value,
                 f"{count} GPUs" if count else "whatever the driver lists")  # fmt: skip
        return None


def _count(value: str) -> int | None:
    """A plain non-negative whole number (digits only, no sign, space or exponent) up to MAX_GPUS."""
    if not (value.isascii() and value.isdigit()) or len(value) > 4 or int(value) > MAX_GPUS:
        return None
    return int(value)
