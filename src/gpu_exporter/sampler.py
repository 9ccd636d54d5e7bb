"""The background sampler: one cycle per interval, each publishing an immutable Snapshot.

A cycle triggers every idle per-GPU worker, waits a bounded time, and assembles what came back.
State carried between cycles is owned here and nowhere else: the busy-time integrators, the last
values of slow-cadence metrics, error and invalid-value totals, and the backend's open/retry and
rediscovery state.

Freshness rule: a GPU's values are served only if its last read finished within
``STALE_INTERVALS`` intervals (``every + 2`` intervals for slow-cadence metrics); older values are
dropped rather than shown as current, and ``gpu_exporter_device_stalled`` says why.

Recovery: while the backend is down it is reopened with backoff (1 s doubling to 30 s). While a
GPU is lost (or has vanished from enumeration) GPUs are enumerated again with the same backoff, so
a GPU that comes back is sampled again without a restart; its worker retries every cycle meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpu_exporter import __version__
from gpu_exporter.backends.base import (
    Backend,
    BackendUnavailable,
    DeviceIdentity,
    HostIdentity,
    SwitchReading,
    XidTally,
)
from gpu_exporter.catalogue import CLOCK_EVENT_REASONS, MetricSpec
from gpu_exporter.exposition import render
from gpu_exporter.families import device_families, self_families, switch_families
from gpu_exporter.snapshot import DeviceView, Frame, Rendered, SelfStats, Snapshot
from gpu_exporter.worker import DeviceWorker, Result

log = logging.getLogger(__name__)

STALE_INTERVALS = 3
#: Fraction of an interval a cycle waits for its reads before publishing without the late ones.
WAIT_FRACTION = 0.8
BACKOFF_MAX_SECONDS = 30.0
_UTILIZATION = "gpu_utilization_ratio"
_PROCESSES = "gpu_compute_processes"
_BUSY = "gpu_utilization_seconds_total"
_IDLE_ALLOCATED = "gpu_idle_while_allocated_seconds_total"
_CLOCK_EVENT_KEYS = {f"gpu_clock_event_active{{reason={reason}}}": reason for reason, _ in CLOCK_EVENT_REASONS}
#: How long clock-event activations are remembered for windowed counts (dcgm-exporter's
#: DCGM_EXP_CLOCK_EVENTS_COUNT).
ACTIVATION_MEMORY_SECONDS = 3600.0

Renderer = Callable[[Frame], Rendered]
#: Below this utilization a GPU counts as nearly idle for gpu_idle_while_allocated_seconds_total.
IDLE_UTILIZATION = 0.05


@dataclass
class _DeviceState:
    """What the sampler remembers about one GPU between cycles."""

    worker: DeviceWorker
    busy_seconds: float | None = None
    idle_allocated_seconds: float | None = None
    integrated_at: float | None = None  # finished_at of the last result folded into busy_seconds
    slow: dict[str, tuple[float, float]] = field(default_factory=dict)  # key → (value, finished_at)
    seen: Result | None = None
    active: frozenset[str] = frozenset()  # clock-event reasons active in the last read
    activations: dict[str, list[float]] = field(default_factory=dict)  # reason → Unix times it began
    lost: bool = False  # the last read said the GPU is lost
    vanished: bool = False  # no longer enumerated by the driver


class _Backoff:
    """Doubling delay between retries, from 1 s to BACKOFF_MAX_SECONDS."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._delay, self._next = 1.0, 0.0

    def due(self, now: float) -> bool:
        return now >= self._next

    def failed(self, now: float) -> None:
        self._next = now + self._delay
        self._delay = min(self._delay * 2, BACKOFF_MAX_SECONDS)


class Sampler:
    """Owns the backend and the per-GPU workers; :attr:`snapshot` is always the latest cycle."""

    def __init__(
        self,
        backend: Backend,
        specs: Sequence[MetricSpec],
        interval: float,
        backend_reason: str = "selected",
        watch_events: bool = True,
        renderer: Renderer | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        switch_specs: Sequence[MetricSpec] = (),
    ) -> None:
        self._backend = backend
        self._specs = tuple(specs)
        self._slow = {spec.key: spec.every for spec in specs if spec.every > 1}
        self._derived = {spec.name for spec in specs if spec.derived_from is not None}
        self._interval = interval
        self._backend_reason = backend_reason
        self._watch_events = watch_events
        self._render = renderer or native_renderer(self._specs, tuple(switch_specs))
        self._clock = clock
        self._wall = wall_clock
        self._done = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._states: dict[str, _DeviceState] = {}  # by GPU uuid
        self._host = HostIdentity()
        self._open = False
        self._down_reason = "starting"
        self._open_backoff = _Backoff()
        self._discover_backoff = _Backoff()
        self._cycle = 0
        self._errors: dict[str, int] = {}
        self._invalid: dict[str, int] = {}
        self._last_success: float | None = None
        self.heartbeat = clock()
        self.first_cycle_done = threading.Event()
        self.snapshot = self._build(cycle_seconds=None, devices=(), events={})

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
        for state in self._states.values():
            state.worker.stop()
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

    # one cycle -------------------------------------------------------------------------------
    def run_cycle(self) -> Snapshot:
        """Sample once and publish the snapshot (also used by tests to step synchronously)."""
        started = self._clock()
        self.heartbeat = started
        if not self._open:
            self._try_open(started)
        elif self._needs_rediscovery():
            self._try_rediscover(started)
        cycle = self._cycle
        self._cycle += 1
        triggered = [state for state in self._states.values() if state.worker.trigger(cycle)]
        deadline = started + WAIT_FRACTION * self._interval
        with self._done:
            self._done.wait_for(
                lambda: all(state.worker.busy_since is None for state in triggered),
                timeout=max(0.0, deadline - self._clock()),
            )
        now = self._clock()
        views = tuple(self._view(state, now) for state in self._states.values())
        if any(view.up and view.values for view in views):
            self._last_success = self._wall()
        events = self._backend.events() if self._open else {}
        switches = self._backend.switches() if self._open else ()
        snapshot = self._build(cycle_seconds=self._clock() - started, devices=views, events=events, switches=switches)
        self.snapshot = snapshot  # the single reference swap scrapes read
        return snapshot

    def _try_open(self, now: float) -> None:
        if not self._open_backoff.due(now):
            return
        try:
            host, devices = self._backend.open(self._watch_events)
        except BackendUnavailable as err:
            if err.reason != self._down_reason:
                log.error("%s backend unavailable: %s (retrying with backoff)", self._backend.name, err)
            self._down_reason = err.reason
            self._open_backoff.failed(now)
            return
        self._open, self._host = True, host
        self._open_backoff.reset()
        self._adopt(devices)
        log.info(
            "%s backend ready: driver %s, %d GPU(s): %s", self._backend.name, host.driver_version or "?",
            len(devices), ", ".join(f"{d.index}={d.name or d.uuid}" for d in devices) or "none",
        )  # fmt: skip

    def _needs_rediscovery(self) -> bool:
        return any(state.vanished or state.lost for state in self._states.values())

    def _try_rediscover(self, now: float) -> None:
        if not self._discover_backoff.due(now):
            return
        try:
            devices = self._backend.discover()
        except BackendUnavailable as err:
            # The library stopped working altogether (e.g. DCGM's host engine went away): the
            # backend is down until it reopens, which _try_open retries with backoff.
            log.error("re-enumerating GPUs failed: %s; reopening the %s backend with backoff", err, self._backend.name)
            self._backend.close()
            self._open, self._down_reason = False, err.reason
            self._open_backoff.failed(now)
            return
        self._adopt(devices)
        if self._needs_rediscovery():
            self._discover_backoff.failed(now)
        else:
            self._discover_backoff.reset()

    def _adopt(self, devices: Sequence[DeviceIdentity]) -> None:
        """Start workers for new GPUs, refresh identities, and mark GPUs that vanished."""
        seen = {device.uuid for device in devices}
        for device in devices:
            state = self._states.get(device.uuid)
            if state is None:
                worker = DeviceWorker(self._backend, device, self._specs, self._done, self._clock)
                self._states[device.uuid] = _DeviceState(worker)
            else:
                if state.vanished:
                    log.info("GPU %s is back", device.uuid)
                state.vanished = False
                state.worker.device = device
        for uuid, state in self._states.items():
            if uuid not in seen and not state.vanished:
                log.error("GPU %d (%s) vanished from the driver's device list", state.worker.device.index, uuid)
                state.vanished = True

    def _view(self, state: _DeviceState, now: float) -> DeviceView:
        worker = state.worker
        result = worker.result
        stalled = worker.busy_since is not None and now - worker.busy_since > self._interval
        if result is None:
            return DeviceView(worker.device, up=not state.vanished, values={}, stalled=stalled)
        new = result is not state.seen
        state.seen = result
        if new and (result.reading is None) != state.lost:
            state.lost = result.reading is None
            if state.lost:
                log.error("GPU %d lost: %s", worker.device.index, result.error)
            else:
                log.info("GPU %d (%s) answers again", worker.device.index, worker.device.uuid)
        if result.reading is None or state.vanished:
            # A lost GPU's integrators restart with it (a counter reset, which rate() handles).
            state.busy_seconds = state.idle_allocated_seconds = state.integrated_at = None
            state.slow.clear()
            return DeviceView(worker.device, up=False, values={}, stalled=stalled, read_seconds=result.seconds)
        if new:
            for kind, count in result.reading.errors.items():
                self._errors[kind] = self._errors.get(kind, 0) + count
            for name, count in result.reading.invalid.items():
                self._invalid[name] = self._invalid.get(name, 0) + count
            self._note_activations(state, result.reading.values)
        values = self._fresh_values(state, result, now, new)
        fresh = now - result.finished_at <= STALE_INTERVALS * self._interval
        return DeviceView(
            worker.device, up=True, values=values,
            mig_values=result.reading.mig_values if fresh else {},
            link_values=result.reading.link_values if fresh else {},
            stalled=stalled, read_seconds=result.seconds,
        )  # fmt: skip

    def _note_activations(self, state: _DeviceState, values: dict[str, float]) -> None:
        """Remember when each clock-event reason became active (for windowed counts)."""
        active = frozenset(reason for key, reason in _CLOCK_EVENT_KEYS.items() if values.get(key) == 1)
        now = self._wall()
        for reason in active - state.active:
            state.activations.setdefault(reason, []).append(now)
        for reason, times in state.activations.items():
            state.activations[reason] = [t for t in times if t >= now - ACTIVATION_MEMORY_SECONDS]
        state.active = active

    def _fresh_values(self, state: _DeviceState, result: Result, now: float, new: bool) -> dict[str, float]:
        reading = result.reading
        assert reading is not None
        if new:
            for key, every in self._slow.items():
                if result.cycle % every == 0:  # due in that read: take its value, or its absence
                    if key in reading.values:
                        state.slow[key] = (reading.values[key], result.finished_at)
                    else:
                        state.slow.pop(key, None)
            self._integrate(state, reading.values.get(_UTILIZATION), reading.values.get(_PROCESSES), result.finished_at)
        values: dict[str, float] = {}
        if now - result.finished_at <= STALE_INTERVALS * self._interval:
            values = {key: value for key, value in reading.values.items() if key not in self._slow}
            for name, total in ((_BUSY, state.busy_seconds), (_IDLE_ALLOCATED, state.idle_allocated_seconds)):
                if total is not None and name in self._derived:
                    values[name] = total
        for key, (value, at) in state.slow.items():
            if now - at <= (self._slow[key] + 2) * self._interval:
                values[key] = value
        return values

    def _integrate(self, state: _DeviceState, utilization: float | None, processes: float | None, at: float) -> None:
        """Busy seconds += utilization × time since the previous read; idle-while-allocated seconds
        += that time when utilization is below IDLE_UTILIZATION and a compute process is present.
        The time is capped at the stale limit, so a GPU that was unreachable for minutes is not
        credited with guessed time; the idle counter exists only where processes can be counted."""
        if utilization is None:
            return
        if state.busy_seconds is None or state.integrated_at is None:
            state.busy_seconds = 0.0
            state.idle_allocated_seconds = 0.0 if processes is not None else None
        else:
            elapsed = max(0.0, min(at - state.integrated_at, STALE_INTERVALS * self._interval))
            state.busy_seconds += utilization * elapsed
            if processes is None:
                state.idle_allocated_seconds = None
            else:
                idle = elapsed if utilization < IDLE_UTILIZATION and processes >= 1 else 0.0
                state.idle_allocated_seconds = (state.idle_allocated_seconds or 0.0) + idle
        state.integrated_at = at

    def _build(
        self,
        cycle_seconds: float | None,
        devices: Sequence[DeviceView],
        events: dict[str, XidTally],
        switches: tuple[SwitchReading, ...] = (),
    ) -> Snapshot:
        stats = SelfStats(
            version=__version__,
            backend=self._backend.name,
            backend_up=self._open,
            backend_reason=self._backend_reason if self._open else self._down_reason,
            interval_seconds=self._interval,
            cycle_seconds=cycle_seconds,
            last_success_timestamp=self._last_success,
            errors=dict(self._errors),
            invalid=dict(self._invalid),
        )
        frame = Frame(
            host=self._host,
            devices=tuple(devices),
            events=events if self._watch_events else None,
            clock_activations={
                uuid: {reason: tuple(times) for reason, times in state.activations.items()}
                for uuid, state in self._states.items()
            },
            stats=stats,
            wall_time=self._wall(),
            switches=switches,
        )
        return Snapshot(self._clock(), self._host, tuple(devices), stats, self._render(frame))


def native_renderer(specs: Sequence[MetricSpec], switch_specs: Sequence[MetricSpec] = ()) -> Renderer:
    """Render frames under gpu-exporter's own names, in both exposition formats (NVSwitch families
    only when ``switch_specs`` is not empty, i.e. the nvswitch collector is on)."""

    def render_native(frame: Frame) -> Rendered:
        families = [
            *device_families(specs, frame.host, frame.devices, frame.events),
            *(switch_families(switch_specs, frame.switches) if switch_specs else ()),
            *self_families(frame.stats, frame.devices),
        ]
        return render(families)

    return render_native
