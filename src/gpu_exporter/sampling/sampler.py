"""The background sampler: one cycle per interval, each publishing an immutable Snapshot.

A cycle runs the pipeline for every backend alike: the control worker opens or re-enumerates the
backend when needed, the plan says which rows each root's read asks for, every idle worker (one
per GPU, one for the fabric) reads, the sampler waits a bounded time, then converts what came
back, folds it into the integrators and windows, drains the backend's event queue into the
tallies, and renders the snapshot. The sampler's own thread never calls the vendor library.

Freshness rule: a root's values are served only if its last read finished within
``STALE_INTERVALS`` intervals (``every + 2`` intervals for slow-cadence rows); older values are
dropped rather than shown as current, and ``gpu_exporter_device_stalled`` says why.

Pause (:mod:`.pause`): while a full pause is asked for, no read is started, the control worker closes the
backend once the reads in flight are done, and snapshots hold no GPU (absent, never stale or zero)
until the pause ends and the backend is opened again, every GPU's first read then asking for every row
(counters kept). A profiling pause leaves the profiling rows out of every request and has the backend
release what holds the counters, until it ends.

Recovery: while the backend is down it is reopened with backoff (1 s doubling to 30 s). While a
GPU is lost (or has vanished from enumeration) GPUs are enumerated again with the same backoff, so
a GPU that comes back is sampled again without a restart. A GPU that stays out of the driver's
list for ``vanished_retention`` seconds is forgotten (its series go); its event counts are kept by
UUID in case it returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpu_exporter import __version__
from gpu_exporter.backends.base import Backend, DeviceIdentity, HostIdentity, RawReading, Request, tally
from gpu_exporter.catalogue import PRECREATED_ERROR_KINDS, PRECREATED_INVALID, MetricSpec
from gpu_exporter.model import Entity
from gpu_exporter.sampling.consumers import Attribution, Memory
from gpu_exporter.sampling.convert import Converted, convert, group
from gpu_exporter.sampling.derive import Integrators, Windows
from gpu_exporter.sampling.events import EventTallies, XidTally
from gpu_exporter.sampling.health import HealthModel
from gpu_exporter.sampling.inventory import ExpectedGpus
from gpu_exporter.sampling.memo import HOLD_FIRST_MAX_INTERVAL, RETRY_SECONDS, UnsupportedMemo
from gpu_exporter.sampling.pause import Pause, Pauses
from gpu_exporter.sampling.plan import STALE_INTERVALS, Plan
from gpu_exporter.sampling.processes import MAX_PROCESSES, fold
from gpu_exporter.sampling.readpool import ReadPool
from gpu_exporter.sampling.roots import (
    NOT_A_FAULT,
    Backoff,
    Control,
    ControlOutcome,
    CycleNotes,
    RootState,
    current_values,
    device_view,
)
from gpu_exporter.sampling.roster import Roster
from gpu_exporter.sampling.snapshot import CollectorStatus, DeviceView, Frame, Renderer, SelfStats, Snapshot
from gpu_exporter.sampling.worker import Result, Worker

log = logging.getLogger(__name__)
_Values = dict[Entity, dict[str, float]]

__all__ = ["STALE_INTERVALS", "Sampler"]

#: Fraction of an interval a cycle waits for its reads before publishing without the late ones.
WAIT_FRACTION = 0.8
#: Most GPU reads in flight at once (the read pool widens to it only while reads stay queued).
READ_CONCURRENCY = 4
#: A read busy this long (real seconds) no longer counts against READ_CONCURRENCY: the pool starts
#: another thread in place of the one it holds.
SLOW_READ_SECONDS = 0.05
#: How long a GPU that left the driver's device list keeps reporting gpu_up 0 before it is forgotten.
VANISHED_RETENTION_SECONDS = 3600.0
# How often GPUs are enumerated again while all answer: picks up MIG instances created or destroyed
# at run time (a DRA driver does this per claim) and hot-added GPUs; 0 turns it off.
REDISCOVER_SECONDS = 30.0


class Sampler:
    """Owns the backend, the workers and the pipeline state; :attr:`snapshot` is the latest cycle."""

    def __init__(
        self,
        backend: Backend,
        specs: Sequence[MetricSpec],
        interval: float,
        backend_reason: str,
        *,
        renderer: Renderer,
        attribution: Attribution,
        memory: Memory,
        watch_events: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        vanished_retention: float = VANISHED_RETENTION_SECONDS,
        unsupported_retry: float = RETRY_SECONDS,
        rediscover_interval: float = REDISCOVER_SECONDS,
        max_processes: int = MAX_PROCESSES,
        expected_gpus: int | ExpectedGpus | None = None,
        pauses: Pauses | None = None,
    ) -> None:
        """``renderer`` turns each cycle's frame into its exposition, ``attribution`` labels each GPU's
        processes and adds its allocations (on the read's thread, after processes beyond
        ``max_processes`` per GPU are folded), ``memory`` is what the renderer needs kept beyond
        current values (:mod:`gpu_exporter.assemble` builds all three); ``pauses`` holds the pause asked
        for, if any (:mod:`.pause`); ``expected_gpus`` the GPUs the node should have (:mod:`.inventory`)."""
        self._backend = backend
        self._specs = tuple(specs)
        self._plan = Plan(self._specs, backend.name, interval)
        self._interval = interval
        self._backend_reason = backend_reason
        self._watch_events = watch_events
        self._render = renderer
        self._clock = clock
        self._wall = wall_clock
        self._retention = vanished_retention
        self._rediscover = rediscover_interval
        self._enumerated_at = 0.0  # monotonic time of the last successful open or enumeration
        self._attribution = attribution
        self._max_processes = max_processes
        self._memory = memory
        self._memo = UnsupportedMemo(unsupported_retry, clock, hold_first=interval <= HOLD_FIRST_MAX_INTERVAL)
        self._integrators = Integrators(self._specs, STALE_INTERVALS * interval)
        self._windows = Windows(self._specs, memory.clock_events_seconds)
        self._tallies = EventTallies(memory.xids_seconds)
        self._health = HealthModel(expected_gpus)
        self._done = threading.Condition()
        self._reads = ReadPool(READ_CONCURRENCY, SLOW_READ_SECONDS, self._done)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._control = Control(backend, watch_events, self._done, clock)
        self._roster = Roster(self._worker_for)
        self._fabric: RootState | None = None
        self._host = HostIdentity()
        self._open = False
        self._down_reason = "starting"
        self._down_message = "not opened yet"  # why the backend is down, in words with the fix
        self._open_backoff = Backoff()
        self._pauses = pauses
        self._pause: Pause | None = None  # the pause this cycle runs under
        self._profiling_released = False  # the backend was told to release profiling (a profiling pause)
        self._unprofiled: dict[int, tuple[tuple[MetricSpec, ...], tuple[MetricSpec, ...]]] = {}
        self._discover_backoff = Backoff()
        self._cycle = 0
        # Counters start at 0 (their dashboard panels and rate() need a series before the first event):
        # the commonest error kinds, and the values the sanity filter most often drops.
        self._errors: dict[str, int] = dict.fromkeys(PRECREATED_ERROR_KINDS, 0)
        names = {spec.name for spec in self._specs}
        self._invalid: dict[str, int] = {name: 0 for name in PRECREATED_INVALID if name in names}
        self._last_success: float | None = None
        collectors = dict.fromkeys(spec.collector for spec in self._plan.readable)
        self._collectors = (*collectors, *(("xid",) if watch_events else ()))
        self.heartbeat = clock()
        self.first_cycle_done = threading.Event()
        self.snapshot = self._build(None, (), {}, {})

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Run cycles on a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and the workers, then close the backend (workers stuck in a call are abandoned)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for state in self._roots():
            state.worker.stop()
        self._reads.stop()
        self._control.worker.stop()
        self._backend.close()

    def alive(self) -> bool:
        """True while the cycle thread runs and has ticked recently (for /healthz)."""
        running = self._thread is not None and self._thread.is_alive()
        return running and self._clock() - self.heartbeat <= STALE_INTERVALS * self._interval + 5.0

    def _loop(self) -> None:
        next_tick = self._clock()
        while not self._stop.is_set():
            try:
                self.run_cycle()
            except Exception:
                log.exception("sampling cycle failed")
            self.first_cycle_done.set()
            next_tick += self._interval
            now = self._clock()
            if next_tick < now:  # a slow cycle: skip the missed ticks instead of bursting
                next_tick = now + self._interval
            self._stop.wait(next_tick - now)

    def _roots(self) -> list[RootState]:
        return [*self._roster, *((self._fabric,) if self._fabric is not None else ())]

    # one cycle -------------------------------------------------------------------------------
    def run_cycle(self) -> Snapshot:
        """Sample once and publish the snapshot (also used by tests to step synchronously)."""
        started = self._clock()
        self.heartbeat = started
        deadline = started + WAIT_FRACTION * self._interval
        cycle = self._cycle
        self._cycle += 1
        self._pause = self._pauses.current() if self._pauses is not None else None
        self._steer(started, cycle, deadline)
        released = self._full_pause()
        notes = CycleNotes()
        for state in self._roots():  # a read that finished after the last cycle's wait: fold it before
            self._take(state, notes)  # the next read replaces it (a first read asks for every row)
        triggered = self._trigger(cycle) if self._open and not released else []
        self._wait_reads(triggered, deadline)
        now = self._clock()
        self._tallies.add(self._backend.drain_events())
        views = () if released else tuple(self._view(state, now, notes) for state in self._roster)
        fabric = {} if released else self._fabric_samples(now, notes)
        if not released:
            self._forget_vanished(now)
        wall = self._wall()  # the frame's time, and the last sample's when GPUs answered: one reading
        if any(view.up and view.values for view in views):
            self._last_success = wall
        events = {view.identity.uuid: self._tallies.tally(view.identity.uuid) for view in views}
        snapshot = self._build(self._clock() - started, views, events, fabric, notes, wall)
        self.snapshot = snapshot  # the single reference swap scrapes read
        self._memo.report()  # one line per GPU for what turned unsupported (or answers again) this cycle
        return snapshot

    def _trigger(self, cycle: int) -> list[RootState]:
        """Trigger every idle root's worker (a busy one, still in an earlier read, is left alone).
        GPU reads queue on the read pool: one thread drains them while they are quick, up to
        ``READ_CONCURRENCY`` while they stay queued; reader threads woken together spend CPU handing
        the GIL to each other (every NVML call releases it)."""
        return [state for state in self._roots() if state.worker.trigger(cycle)]

    def _wait(self, finished: Callable[[], bool], deadline: float) -> None:
        with self._done:
            self._done.wait_for(finished, timeout=max(0.0, deadline - self._clock()))

    def _wait_reads(self, triggered: Sequence[RootState], deadline: float) -> None:
        """Wait until every triggered read finished or ``deadline``; every ``SLOW_READ_SECONDS`` the
        pool replaces threads held by slow reads, so a hung GPU never holds the others back."""

        def finished() -> bool:
            return all(state.worker.busy_since is None for state in triggered)

        while True:
            with self._done:
                remaining = deadline - self._clock()
                if finished() or remaining <= 0:
                    return
                self._done.wait_for(finished, timeout=min(remaining, SLOW_READ_SECONDS))
                if finished():
                    return
            self._reads.check()

    def _full_pause(self) -> bool:
        return self._pause is not None and self._pause.scope == "full"

    def _reading(self, now: float) -> bool:
        """True while a read started before is still running (one stalled past an interval does not count)."""
        return any(
            state.worker.busy_since is not None and now - state.worker.busy_since <= self._interval
            for state in self._roots()
        )

    def _steer(self, now: float, cycle: int, deadline: float) -> None:
        """Open, re-enumerate, close for a full pause or release profiling for a profiling pause through the
        control worker when due, waiting within the deadline, and apply what it returned (in this cycle or,
        if it is slow, a later one). A pause's release waits for the reads in flight."""
        release = self._pause is not None and self._pause.scope == "profiling"
        if self._full_pause():
            if self._open and not self._reading(now):
                self._control.start("close", cycle)
        elif not self._open and self._open_backoff.due(now):
            self._control.start("open", cycle)
        elif self._open and release != self._profiling_released and not (release and self._reading(now)):
            self._control.start("release_profiling" if release else "restore_profiling", cycle)
        elif self._open and self._discovery_due(now):
            self._control.start("discover", cycle)
        self._wait(lambda: self._control.worker.busy_since is None, deadline)
        busy_since = self._control.worker.busy_since
        if busy_since is not None and self._clock() - busy_since > self._interval:
            # An open or re-enumeration call that hangs: the GPUs' reads go on with the devices known
            # before; each cycle it is still hung is counted, so it shows.
            tally(self._errors, "discovery_stalled")
        outcome = self._control.take()
        if outcome is not None:
            self._apply(outcome, self._clock())

    def _apply(self, outcome: ControlOutcome, now: float) -> None:
        backend = self._backend.name
        if outcome.kind == "closed":  # a full pause: nothing is read or enumerated until it ends
            # profiling stays as released or not: the backend keeps it
            self._open, self._down_reason, self._down_message = False, "paused", "paused on request"
            self._open_backoff.reset()
            for state in self._roster:
                state.everything_in = None  # when it ends, each GPU's first read asks for every row
                state.seen_before_pause = state.seen is not None
            log.info("%s backend closed for a %s", backend, self._pause.describe() if self._pause else "pause")
            return
        if outcome.kind == "profiling":
            self._profiling_released = outcome.reason == "released"
            return
        if outcome.kind == "opened":
            self._open, self._host = True, outcome.host
            self._open_backoff.reset()
            self._memo.rediscovered()
            self._enumerated_at = now
            self._roster.adopt(outcome.devices, now)
            if self._fabric is None:  # also the backend's host-wide duties (events, port changes); on
                # the read pool after the GPUs: a thread of its own woke (and woke the sampler) every cycle
                fabric = Worker("fabric-reader", self._read_fabric, self._done, self._clock, runs=self._reads)
                self._fabric = RootState(fabric)
            devices = outcome.devices
            log.info(
                "%s backend ready: driver %s, %d GPU(s): %s", backend, outcome.host.driver_version or "?",
                len(devices), _models(devices),
            )  # fmt: skip
        elif outcome.kind == "unavailable":
            if outcome.reason != self._down_reason:
                log.error("%s backend unavailable: %s (retrying with backoff)", backend, outcome.message)
            self._down_reason, self._down_message = outcome.reason, outcome.message
            self._open_backoff.failed(now)
        elif outcome.kind == "discovered":
            answering = self._roster.answering()
            self._enumerated_at = now
            self._roster.adopt(outcome.devices, now)
            if {device.uuid: device for device in outcome.devices} != answering:
                # A GPU or MIG device came, went or came back (a reset may change what it supports):
                # ask every pair again. The periodic re-enumeration that finds the same devices asks
                # nothing again, the retry interval does (it re-asked every pair every 30 s).
                self._memo.rediscovered()
            if self._roster.needs_rediscovery():
                self._discover_backoff.failed(now)
            else:
                self._discover_backoff.reset()
        else:  # "down": the library stopped working altogether; the control worker closed it
            log.error("re-enumerating GPUs failed: %s; reopening the %s backend with backoff", outcome.message, backend)
            self._open, self._down_reason, self._down_message = False, outcome.reason, outcome.message
            self._open_backoff.failed(now)

    def _why_down(self) -> str:
        """Why the backend is down in words: the pause's scope, end and asker while one holds it closed."""
        if self._down_reason == "paused" and self._pause is not None:
            return f"paused on request: {self._pause.describe()}; gpu-exporter resume ends it now"
        return self._down_message

    def _discovery_due(self, now: float) -> bool:
        """Enumerate again: with backoff while a GPU is lost or vanished, else every ``rediscover_interval``."""
        if self._roster.needs_rediscovery():
            return self._discover_backoff.due(now)
        return self._rediscover > 0 and now - self._enumerated_at >= self._rediscover

    def _forget_vanished(self, now: float) -> None:
        for uuid in self._roster.forget_vanished(now, self._retention):
            self._integrators.reset(uuid)
            self._windows.forget(uuid)
        self._integrators.forget_allocations(now - self._retention)  # pods and jobs gone as long

    def _worker_for(self, device: DeviceIdentity) -> Worker[RawReading]:
        return Worker(f"gpu{device.index}-reader", self._reader(device.uuid), self._done, self._clock, self._reads)

    def _reader(self, uuid: str) -> Callable[[int], RawReading]:
        def read(cycle: int) -> RawReading:
            state = self._roster.get(uuid)
            if state is None or state.identity is None:
                return RawReading()
            if (state.seen is None or state.seen_before_pause) and state.everything_in is None:
                # A GPU's first read asks for every row, so a GPU that joins late (or after a full pause)
                # has its limits at once.
                state.everything_in, state.seen_before_pause = cycle, False
            request = self._plan.request("gpu", cycle, self._memo.asks, everything=state.everything_in == cycle)
            if self._pause is not None or self._profiling_released:
                request = self._without_profiling(request)
            reading = self._backend.read(state.identity, request)
            # Off the sampler's thread, in this order: processes beyond the limit folded, then labelled.
            fold(reading, self._max_processes)
            self._attribution.apply(reading, state.identity)
            return reading

        return read

    def _without_profiling(self, request: Request) -> Request:
        """``request`` without the profiling collector's rows (a profiling pause, from the moment it is
        asked for until the backend has its profiling back): one filtered tuple per tuple of due rows."""
        known = self._unprofiled.get(id(request.specs))
        if known is None or known[0] is not request.specs:
            specs = tuple(spec for spec in request.specs if spec.collector != "profiling")
            known = self._unprofiled[id(request.specs)] = (request.specs, specs)
        return replace(request, specs=known[1])

    def _read_fabric(self, cycle: int) -> RawReading:
        return self._backend.read_fabric(self._plan.request("fabric", cycle, self._memo.asks))

    # assembling ------------------------------------------------------------------------------
    def _fold(self, state: RootState, result: Result[RawReading], notes: CycleNotes) -> Converted | None:
        """Take a new result into the pipeline (once): counts, conversion, slow values, derivations."""
        reading = result.value
        if reading is None:
            if not result.lost:
                self._errors["exception"] = self._errors.get("exception", 0) + 1
                notes.failed.update(spec.collector for spec in self._plan.readable)
            return None
        for kind, count in reading.errors.items():
            self._errors[kind] = self._errors.get(kind, 0) + count
        notes.failed.update(reading.collector_errors)
        for collector, seconds in reading.collector_seconds.items():
            notes.seconds[collector] = notes.seconds.get(collector, 0.0) + seconds
        converted = convert(reading, self._backend.name, self._memo, keep_raw=self._memory.raw)
        for name, count in converted.invalid.items():
            self._invalid[name] = self._invalid.get(name, 0) + count
        by_uid = {entity.uid: values for entity, values in converted.values.items()}
        everything = result.cycle == state.everything_in
        due = self._plan.slow_due(result.cycle, everything)
        for entity, values in converted.values.items():
            for key in due:  # due in that read: take its value, or its absence
                if key in values:
                    raw = converted.raw.get(entity, {}).get(key, values[key])
                    state.slow[(entity, key)] = (values[key], raw, result.finished_at)
                else:
                    state.slow.pop((entity, key), None)
            inputs = values
            if entity.kind in ("pod", "job"):  # an allocation is idle by its GPU's values
                inputs = by_uid.get(dict(entity.info).get("parent", ""), {})
            self._integrators.fold(entity, inputs, result.finished_at, converted.samples.get(entity))
            if entity.kind == "gpu":
                self._windows.note(entity.uid, values, self._wall())
        self._integrators.split(converted.values, result.finished_at)  # the allocations' parts of the GPU
        return converted

    def _current(self, state: RootState, now: float) -> tuple[_Values, _Values]:
        return current_values(state, now, self._plan, self._integrators, self._interval)

    def _take(self, state: RootState, notes: CycleNotes) -> None:
        result = state.worker.result
        if result is not None and result is not state.seen:
            state.seen = result
            if result.lost != state.lost and state.identity is not None:
                state.lost = result.lost
                identity = state.identity
                if state.lost and result.reason in NOT_A_FAULT:
                    # Not fallen off the bus: a GPU the backend does not support or that is detached.
                    log.warning("GPU %d down (%s): %s", identity.index, result.reason, result.error)
                elif state.lost:
                    log.error("GPU %d lost: %s", identity.index, result.error)
                else:
                    log.info("GPU %d (%s) answers again", identity.index, identity.uuid)
            converted = self._fold(state, result, notes)
            state.current, state.current_at = converted, result.finished_at if converted is not None else None

    def _view(self, state: RootState, now: float, notes: CycleNotes) -> DeviceView:
        busy_since = state.worker.busy_since
        stalled = busy_since is not None and now - busy_since > self._interval
        if stalled:
            notes.failed.update(spec.collector for spec in self._plan.readable if spec.root == "gpu")
        self._take(state, notes)
        view = device_view(state, now, stalled, self._plan, self._integrators, self._interval)
        lacking = self._memo.lacking(group(view.entity)) if self._memo.remembers_any() else ()
        return replace(view, unsupported=lacking) if lacking else view

    def _fabric_samples(self, now: float, notes: CycleNotes) -> dict[Entity, dict[str, float]]:
        state = self._fabric
        if state is None or not self._open:
            return {}
        if state.worker.busy_since is not None and now - state.worker.busy_since > self._interval:
            notes.failed.update(spec.collector for spec in self._plan.readable if spec.root == "fabric")
        self._take(state, notes)
        return self._current(state, now)[0]

    def _build(
        self,
        cycle_seconds: float | None,
        devices: Sequence[DeviceView],
        events: dict[str, XidTally],
        fabric: dict[Entity, dict[str, float]],
        notes: CycleNotes | None = None,
        wall: float | None = None,
    ) -> Snapshot:
        collectors: dict[str, CollectorStatus] = {}
        if notes is not None and self._open:
            for name in self._collectors:
                if name == "xid":
                    collectors[name] = CollectorStatus(self._backend.events_healthy())
                else:
                    collectors[name] = CollectorStatus(name not in notes.failed, notes.seconds.get(name, 0.0))
        stats = SelfStats(
            version=__version__,
            backend=self._backend.name,
            backend_up=self._open,
            backend_reason=self._backend_reason if self._open else self._down_reason,
            backend_problem="" if self._open else self._why_down(),
            interval_seconds=self._interval,
            cycle_seconds=cycle_seconds,
            last_success_timestamp=self._last_success,
            errors=dict(self._errors),
            invalid=dict(self._invalid),
            collectors=collectors,
            sources=self._attribution.sources(),
            not_served=self._backend.not_served() if self._open else {},
            pause=self._pause,
        )
        wall_time = self._wall() if wall is None else wall
        watched = events if self._watch_events else None
        watch = self._backend.health_watch() if self._open else None  # DCGM's own health watches
        health = self._health.assess(devices, watched, wall_time, known=notes is not None and self._open, watch=watch)
        frame = Frame(
            host=self._host,
            devices=tuple(devices),
            events=watched,
            windows=self._windows.snapshot(),
            stats=stats,
            wall_time=wall_time,
            fabric=fabric,
            health=health,
        )
        rendered = self._render(frame)
        return Snapshot(self._clock(), self._host, tuple(devices), stats, rendered, frame.events, health)


def _models(devices: Sequence[DeviceIdentity]) -> str:
    """The GPUs by model, runs of indexes together: ``0-7 NVIDIA H100 80GB HBM3`` (one short line for
    any number of GPUs of a model), ``none`` for no GPU."""
    runs: list[tuple[int, int, str]] = []
    for device in devices:
        name = device.name or device.uuid
        if runs and runs[-1][2] == name and runs[-1][1] == device.index - 1:
            runs[-1] = (runs[-1][0], device.index, name)
        else:
            runs.append((device.index, device.index, name))
    return ", ".join(f"{a}={name}" if a == b else f"{a}-{b} {name}" for a, b, name in runs) or "none"
