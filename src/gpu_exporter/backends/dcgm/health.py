"""Whether a GPU still answers, as a DCGM client can tell.

A host engine does not report a GPU lost at run time per value: its watched fields keep coming back
with status OK and a blank sentinel of their type (``InsertNvmlErrorValue`` for
NVML_ERROR_GPU_IS_LOST), or stop being updated, and it keeps listing the GPU. So a GPU that gave
values before and whose every watched value is blank or stale for :data:`SUSPECT_READS` reads in a
row is looked at through the engine's own status: ``dcgmGetGpuStatus`` on 4.x (lost, detached,
unsupported, inaccessible, disabled), on 3.x, which has no such call, whether the engine still
counts it among its supported GPUs. 3.3's engine leaves a GPU it lost in status OK; every value
blank then is the loss. A GPU whose values are only stale while the engine says it is OK stays up
(its values are dropped as stale, and counted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpu_exporter.backends.dcgm.errors import DcgmError
from gpu_exporter.backends.dcgm.values import Blank, FieldValue, decode, is_stale

log = logging.getLogger(__name__)

#: Reads in a row with every value blank or stale before the engine's status is asked.
SUSPECT_READS = 2
#: The same for a GPU that never gave a value since the exporter started (slower: a new watch reads
#: blank until the engine's first update).
SUSPECT_READS_NEVER_ANSWERED = 5
#: A read must hold at least this many GPU values to say anything about the GPU (temperature and
#: power are asked every cycle; a cycle that asks one field that happens to be blank says nothing).
MIN_SAMPLES = 2
#: Engine statuses that mean the GPU is down, each its own ``gpu_exporter_device_down`` reason.
DOWN_STATUSES = frozenset({"lost", "unsupported", "detached", "inaccessible", "disabled"})


@dataclass(frozen=True)
class Down:
    reason: str  # the gpu_exporter_device_down reason
    message: str


class GpuHealth:
    """Per DCGM GPU id: has it answered, how many reads in a row were blank, is it down and why."""

    def __init__(self) -> None:
        self._answered: set[int] = set()
        self._quiet: dict[int, int] = {}
        self._down: dict[int, str] = {}

    def check(
        self, gpu: int, samples: Mapping[int, FieldValue], fresh_after_us: int, status: Callable[[], str]
    ) -> Down | None:
        """The GPU's state after one read of its ``samples`` (before stale ones were dropped);
        ``status`` asks the engine (called only for a suspect GPU)."""
        blank = stale = 0
        for sample in samples.values():
            decoded = decode(sample)
            if is_stale(sample, fresh_after_us):
                stale += 1
            elif isinstance(decoded, Blank):
                blank += decoded.why == "blank"
            else:
                self._answered.add(gpu)
                self._quiet.pop(gpu, None)
                if self._down.pop(gpu, None) is not None:
                    log.info("DCGM GPU id %d gives values again: up", gpu)
                return None
        if len(samples) < MIN_SAMPLES or blank + stale < len(samples):
            return None  # too little asked to tell, or answers that are not about the GPU (not supported, ...)
        count = self._quiet[gpu] = self._quiet.get(gpu, 0) + 1
        needed = SUSPECT_READS if gpu in self._answered else SUSPECT_READS_NEVER_ANSWERED
        if gpu not in self._down and count < needed:
            return None
        try:
            word = status()
        except DcgmError as err:
            log.debug("DCGM status of GPU id %d: %s", gpu, err)
            word = "unknown"
        if word in DOWN_STATUSES:
            reason = word
        elif word == "inactive" or stale == 0:
            reason = "lost"  # no longer among the engine's supported GPUs, or (3.x) every value blank
        else:
            return None  # only stale values, and the engine says it is fine: dropped as stale
        what = "blank" if stale == 0 else "blank or stale"
        if self._down.get(gpu) != reason:
            log.error(
                "DCGM GPU id %d: every watched value %s for %d reads, engine status %s: reported down (%s); its "
                "counters are kept, and it is up again once it gives values", gpu, what, count, word, reason,
            )  # fmt: skip
        self._down[gpu] = reason
        return Down(reason, f"every DCGM value {what} for {count} reads (engine status: {word})")
