"""DCGM's own health watches on the exporter's GPU group, checked off the sampling path.

Set: at each rebuild of the watches (a new connection, a new generation of groups) ``dcgmHealthSet_v2``
on the GPU group(s) with the systems the engine's release watches on a GPU (:mod:`.incidents`:
PCIe, NVLink, memory, InfoROM, thermal, power; driver from 4.6), sampled every
:data:`CHECK_SECONDS` and kept :data:`KEEP_AGE_SECONDS` (DCGM's own default for its legacy
``dcgmHealthSet``; its PCIe, thermal and power watches judge a minute of samples). A group re-created
gets them again; a refusal is logged once and counted, and the model then judges from the fields alone.

Check: every :data:`CHECK_SECONDS` (15 s: DCGM recommends checking as often as the watches sample,
and 15 s is the common scrape interval; each check walks every watched field of every GPU in the
engine, so once a second would be wasted work) ``dcgmHealthCheck`` runs on a thread of its own,
started from the fabric worker; one at a time, never on the sampler's thread, and no lock of the
backend is held across it. A check that has not returned after :data:`CHECK_DEADLINE_SECONDS` is a
stall (NVSentinel #1748 saw one take 45 s under an ECC storm): counted once as
``gpu_exporter_sample_errors_total{kind="health_check_stalled"}``, and no other check starts until it
returns. A failed check counts ``health_check_failed``. The last verdict is kept with its time; once
it is older than :data:`VERDICT_BOUND_SECONDS` the model is told that the watches cannot tell, rather
than that the GPUs are healthy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from gpu_exporter.backends.base import WatchIncident, WatchVerdict
from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.incidents import (
    RESULT_FAIL,
    RESULT_WARN,
    SYSTEM_ALL,
    SYSTEM_NAMES,
    Incident,
    gpu_systems,
    system_names,
)
from gpu_exporter.backends.dcgm.releases import KNOWN, parse_version
from gpu_exporter.catalogue.health_codes import code_action, code_name

log = logging.getLogger(__name__)

#: How often DCGM's health watches are checked (and sample their fields), seconds.
CHECK_SECONDS = 15.0
#: A check not returned after this long is a stall.
CHECK_DEADLINE_SECONDS = 10.0
#: A verdict older than this (three checks) no longer counts: the watches cannot tell.
VERDICT_BOUND_SECONDS = 45.0
#: How long DCGM keeps the samples its health watches judge, seconds.
KEEP_AGE_SECONDS = 600.0
#: The model's statuses by DCGM's health result.
_STATUS = {RESULT_WARN: 1, RESULT_FAIL: 2}

Target = tuple[DcgmAdapter, tuple[str, ...], Mapping[tuple[int, int], str], tuple[str, ...]]


def translate(incidents: Sequence[Incident], owner: Mapping[tuple[int, int], str]) -> list[WatchIncident]:
    """DCGM's incidents on GPUs (and MIG instances, counted to their GPU) in the model's words; results
    other than WARN and FAIL, entities that are no GPU of ours and non-GPU systems are left out."""
    found = []
    for incident in incidents:
        uuid = owner.get((incident.group, incident.entity))
        status = _STATUS.get(incident.result)
        subsystem = "all" if incident.system == SYSTEM_ALL else SYSTEM_NAMES.get(incident.system)
        if uuid is None or status is None or subsystem is None:
            continue
        action = code_action(incident.code, status == 2)
        found.append(WatchIncident(uuid, subsystem, status, action, code_name(incident.code), incident.message))
    return found


class HealthWatch:
    """The health watches of the current watches' GPU groups and the verdict of their last check."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._target: Target | None = None
        self._generation = 0
        self._set_at = 0.0
        self._verdict: WatchVerdict | None = None
        self._answered_at: float | None = None
        self._problem = ""
        self._running_since: float | None = None
        self._stall_counted = False
        self._next_at = 0.0
        self._counts: dict[str, int] = {}
        self._logged: set[str] = set()
        #: Set each time a check finishes (answered or failed); tests wait on it.
        self.finished = threading.Event()

    def _count(self, kind: str) -> None:
        self._counts[kind] = self._counts.get(kind, 0) + 1

    def _once(self, key: str, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message, *args)

    def attach(self, adapter: DcgmAdapter, names: Sequence[str], owner: Mapping[tuple[int, int], str]) -> None:
        """Set the health watches on the GPU groups ``names`` (the watches were (re)built); raises
        :class:`~gpu_exporter.backends.dcgm.errors.DcgmConnectionLost` only."""
        release = parse_version(adapter.release) or min(KNOWN)
        mask = gpu_systems(release)
        try:
            for name in names:
                adapter.health_set(name, mask, int(CHECK_SECONDS * 1e6), KEEP_AGE_SECONDS)
        except DcgmError as err:
            if isinstance(err, DcgmConnectionLost):
                raise
            with self._lock:
                self._target, self._verdict, self._problem = None, None, f"dcgmHealthSet refused: {err}"
                self._count("health_set_failed")
            self._once("set", "DCGM refused its health watches (%s); GPU health is judged from the fields alone", err)
            return
        with self._lock:
            self._generation += 1
            self._target = (adapter, tuple(names), dict(owner), system_names(mask)) if names else None
            self._set_at = self._next_at = self._clock()
            self._verdict, self._answered_at, self._problem = None, None, ""

    def detach(self) -> None:
        with self._lock:
            self._target, self._verdict, self._answered_at = None, None, None
            self._generation += 1

    def take_counts(self) -> dict[str, int]:
        """Stalls and failures counted since the last call, by kind."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def poll(self) -> None:
        """Notice a stalled check; start the next one when it is due and none is running."""
        now = self._clock()
        with self._lock:
            if self._running_since is not None:
                if not self._stall_counted and now - self._running_since > CHECK_DEADLINE_SECONDS:
                    self._stall_counted = True
                    self._count("health_check_stalled")
                    self._once("stall", "dcgmHealthCheck has not returned after %.0f s; sampling goes on, and the "
                               "health verdict becomes unknown after %.0f s", CHECK_DEADLINE_SECONDS,
                               VERDICT_BOUND_SECONDS)  # fmt: skip
                return
            target = self._target
            if target is None or now < self._next_at:
                return
            self._running_since, self._stall_counted = now, False
            self._next_at = now + CHECK_SECONDS
            generation = self._generation
        threading.Thread(target=self._check, args=(target, generation), name="dcgm-health-check", daemon=True).start()

    def _check(self, target: Target, generation: int) -> None:
        adapter, names, owner, systems = target
        verdict: WatchVerdict | None = None
        problem = ""
        try:
            incidents: list[WatchIncident] = []
            for name in names:
                incidents += translate(adapter.health_check(name).incidents, owner)
            verdict = WatchVerdict(systems, tuple(incidents), self._wall())
        except DcgmError as err:
            problem = f"dcgmHealthCheck failed: {err}"
        except Exception as err:  # noqa: BLE001 - a worker thread must not die of a vendor surprise
            problem = f"dcgmHealthCheck failed: {err!r}"
        with self._lock:
            self._running_since = None
            if generation == self._generation:  # not for groups replaced meanwhile
                if verdict is not None:
                    self._verdict, self._answered_at, self._problem = verdict, self._clock(), ""
                else:
                    self._problem = problem
            if verdict is None:
                self._count("health_check_failed")
        if problem:
            log.debug("%s", problem)
        self.finished.set()

    def verdict(self) -> WatchVerdict | None:
        """The verdict the model uses now: None without watches (or before the first check, within the
        bound); the last one while younger than the bound; else one that cannot tell, saying why."""
        now = self._clock()
        with self._lock:
            target, verdict, answered_at, problem = self._target, self._verdict, self._answered_at, self._problem
            running_since, set_at = self._running_since, self._set_at
        if target is None:
            return None
        since = answered_at if answered_at is not None else set_at
        if now - since <= VERDICT_BOUND_SECONDS:
            return verdict
        if running_since is not None and now - running_since > CHECK_DEADLINE_SECONDS:
            why = f"dcgmHealthCheck has not returned for {now - running_since:.0f} s"
        else:
            why = problem or "no health check answered"
        age = "never answered" if answered_at is None else f"last answered {now - answered_at:.0f} s ago"
        return WatchVerdict(target[3], (), None if verdict is None else verdict.at, False, f"{why}; {age}")
