"""What the sampler keeps per root between cycles, and the control worker that opens and
re-enumerates the backend off the sampler's thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpu_exporter import model
from gpu_exporter.backends.base import Backend, BackendUnavailable, DeviceIdentity, HostIdentity, RawReading
from gpu_exporter.model import Entity
from gpu_exporter.sampling.convert import Converted
from gpu_exporter.sampling.derive import Integrators
from gpu_exporter.sampling.plan import STALE_INTERVALS, Plan
from gpu_exporter.sampling.snapshot import DeviceView
from gpu_exporter.sampling.worker import Result, Worker

BACKOFF_MAX_SECONDS = 30.0


def identity_entities(identity: DeviceIdentity) -> list[Entity]:
    """The entities a GPU has by its identity alone: the GPU, then its MIG instances."""
    entities = [model.gpu(identity.index, identity.uuid)]
    for mig in identity.migs:
        entities.append(
            model.mig(
                identity.index, identity.uuid, mig.gpu_instance, mig.compute_instance, mig.profile, mig.uuid, mig.name
            )
        )
    return entities


@dataclass
class RootState:
    """A GPU (or the fabric) between cycles: its worker, identity, last result taken into the
    pipeline and what it converted to, slow-cadence values (value, finished_at) by entity and key,
    whether it is lost, and since when (monotonic) it is out of the driver's device list."""

    worker: Worker[RawReading]
    identity: DeviceIdentity | None = None
    seen: Result[RawReading] | None = None
    current: Converted | None = None
    current_at: float | None = None
    slow: dict[tuple[Entity, str], tuple[float, float, float]] = field(default_factory=dict)  # value, raw, at
    lost: bool = False
    vanished_at: float | None = None
    everything_in: int | None = None  # the cycle of the first read, which asked for every row
    seen_before_pause: bool = False  # read before a full pause: its next read asks for every row again


class Backoff:
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


@dataclass(frozen=True)
class ControlOutcome:
    """What the control worker did: ``opened`` (host, devices), ``discovered`` (devices),
    ``unavailable`` (opening failed) or ``down`` (re-enumerating failed; the backend was closed),
    with the reason word and the message of a failure; ``closed`` (a full pause released the library)
    or ``profiling`` (the profiling collector's vendor state released or restored, ``reason`` says which)."""

    kind: Literal["opened", "discovered", "unavailable", "down", "closed", "profiling"]
    host: HostIdentity = field(default_factory=HostIdentity)
    devices: Sequence[DeviceIdentity] = ()
    reason: str = ""
    message: str = ""


Action = Literal["open", "discover", "close", "release_profiling", "restore_profiling"]


class Control:
    """Opens, re-enumerates and (after a failed enumeration, or for a full pause) closes the backend on its
    own thread, and releases or restores its profiling for a profiling pause."""

    def __init__(
        self,
        backend: Backend,
        watch_events: bool,
        done: threading.Condition,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._watch_events = watch_events
        self._action: Action = "open"
        self._taken: Result[ControlOutcome] | None = None
        self.worker: Worker[ControlOutcome] = Worker("backend-control", self._run, done, clock)

    def start(self, action: Action, cycle: int) -> None:
        """Begin ``action`` unless the previous one still runs."""
        if self.worker.busy_since is None:
            self._action = action
            self.worker.trigger(cycle)

    def take(self) -> ControlOutcome | None:
        """The outcome of a finished action, once."""
        result = self.worker.result
        if result is None or result is self._taken:
            return None
        self._taken = result
        if result.value is None:  # the action raised something unexpected
            return ControlOutcome(
                "unavailable" if self._action == "open" else "down", reason="exception", message=result.error
            )
        return result.value

    def _run(self, _cycle: int) -> ControlOutcome:
        if self._action == "close":
            self._backend.close()
            return ControlOutcome("closed", reason="paused")
        if self._action in ("release_profiling", "restore_profiling"):
            released = self._action == "release_profiling"
            self._backend.release_profiling(released)
            return ControlOutcome("profiling", reason="released" if released else "restored")
        if self._action == "open":
            try:
                host, devices = self._backend.open(self._watch_events)
            except BackendUnavailable as err:
                return ControlOutcome("unavailable", reason=err.reason, message=str(err))
            return ControlOutcome("opened", host, devices)
        try:
            devices = self._backend.discover()
        except BackendUnavailable as err:
            # The library stopped working altogether (e.g. DCGM's host engine went away): the
            # backend is down until it reopens, which the sampler retries with backoff.
            self._backend.close()
            return ControlOutcome("down", reason=err.reason, message=str(err))
        return ControlOutcome("discovered", devices=devices)


Values = dict[Entity, dict[str, float]]


def current_values(
    state: RootState, now: float, plan: Plan, integrators: Integrators, interval: float
) -> tuple[Values, Values]:
    """A root's values that are still current by the freshness rule (fresh reads, derived rows,
    slow rows within their cadence) and the raw vendor values behind the read ones."""
    out: Values = {}
    raws: Values = {}
    converted, at = state.current, state.current_at
    fresh = converted is not None and at is not None and now - at <= STALE_INTERVALS * interval
    for entity, values in (converted.values if converted is not None else {}).items():
        assert converted is not None
        raw = converted.raw.get(entity, {})
        current = {k: v for k, v in values.items() if k not in plan.slow} if fresh else {}
        raws[entity] = {k: raw[k] for k in current if k in raw}
        if fresh:
            current.update(integrators.values(entity))
        out[entity] = current
    for (entity, key), (value, raw_value, read_at) in state.slow.items():
        if entity in out and now - read_at <= plan.current_for(key) * interval:
            out[entity][key] = value
            raws[entity][key] = raw_value
    return out, raws


def device_view(
    state: RootState, now: float, stalled: bool, plan: Plan, integrators: Integrators, interval: float
) -> DeviceView:
    """A GPU's view of this cycle: its current values (every entity it has, empty where nothing is
    current), or none when it is not read yet, answered without a value yet, or lost or vanished (its
    integrators reset and its slow values dropped: a GPU that comes back starts afresh)."""
    identity, result = state.identity, state.worker.result
    assert identity is not None
    empty: Values = {entity: {} for entity in identity_entities(identity)}
    if result is None:
        down = "" if state.vanished_at is None else "vanished"
        return DeviceView(identity, up=not down, samples=empty, stalled=stalled, down_reason=down)
    if result.lost or state.vanished_at is not None:
        integrators.reset(identity.uuid)
        state.slow.clear()
        state.current = None
        reason = "vanished" if state.vanished_at is not None else (result.reason or "lost")
        return DeviceView(
            identity, up=False, samples=empty, stalled=stalled, read_seconds=result.seconds, down_reason=reason
        )
    if state.current is None:
        return DeviceView(identity, up=True, samples=empty, stalled=stalled, read_seconds=result.seconds)
    current, raw = current_values(state, now, plan, integrators, interval)
    return DeviceView(identity, True, {**empty, **current}, stalled, result.seconds, raw)


@dataclass
class CycleNotes:
    """What this cycle's new results said per collector."""

    failed: set[str] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)


#: Reasons a GPU is down that are an operator's information, not a fault (logged as warnings).
NOT_A_FAULT = frozenset({"unsupported", "detached", "inaccessible", "disabled"})
