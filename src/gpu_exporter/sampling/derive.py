"""Rows the pipeline computes rather than reads (the catalogue's ``derive`` data), and the window
of clock-event samples dcgm-exporter's compatibility counts need.

Integrators fold each new read of an entity: an :class:`~gpu_exporter.catalogue.Integral` adds
value × time since the previous read, an :class:`~gpu_exporter.catalogue.IdleWhileHeld` adds the
time while the utilization stayed below its threshold with a holder present, an
:class:`~gpu_exporter.catalogue.IdleWhileAllocated` (on a pod or job, folded with its GPU's values)
the time its GPU ran nothing or nearly nothing, and a :class:`~gpu_exporter.catalogue.Constant`
is its value while the entity exists. The time is capped at
the stale limit, so an entity unreachable for minutes is not credited with guessed time. An
entity's integrators restart when it is lost (a counter reset, which ``rate()`` handles).

Where a read carries the driver's own samples of the integrated utilization (NVML's sample buffer,
several a second), an Integral or IdleWhileHeld credits each sample for the time since the previous
sample (at most :data:`SAMPLE_GAP_SECONDS`) instead of the read for the time since the previous read,
so sub-second dips count as long as they lasted. A read that brings no new sample (reads may come
faster than samples) adds nothing; a read whose backend has no samples at all falls back to the
read's value, and the sample after it starts afresh (no time is credited twice).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.catalogue import (
    WINDOWED_FAMILIES,
    Constant,
    IdleWhileAllocated,
    IdleWhileHeld,
    Integral,
    MetricSpec,
    Share,
)
from gpu_exporter.catalogue.keys import ENERGY, UTILIZATION_SECONDS
from gpu_exporter.model import Entity
from gpu_exporter.sampling.ledger import Interval, holdings, split

#: The most time one driver sample stands for: a longer gap means the buffer ran dry or overflowed.
SAMPLE_GAP_SECONDS = 1.0
Samples = tuple[tuple[float, float], ...]

#: How long clock-event samples are remembered for windowed counts (seconds).
WINDOW_MEMORY_SECONDS = 3600.0


@dataclass
class _Accumulator:
    total: float | None = None
    at: float | None = None  # finished_at of the last read folded in
    sample_at: float | None = None  # the driver's time of the last sample folded in


class Integrators:
    """Derived rows per (entity uid, row key)."""

    def __init__(self, specs: Sequence[MetricSpec], cap_seconds: float) -> None:
        self._rows = tuple(spec for spec in specs if spec.derive is not None)
        self._cap = cap_seconds
        self._state: dict[tuple[str, str], _Accumulator] = {}
        self._allocations: dict[str, float] = {}  # pod or job uid → when it was last folded in
        shares = [spec for spec in self._rows if isinstance(spec.derive, Share)]
        self._shares: dict[str, str] = {spec.derive.part: spec.key for spec in shares if isinstance(spec.derive, Share)}
        self._ledger: dict[str, tuple[float, float | None, float | None]] = {}  # GPU uid → (at, busy, energy)
        self._unseen: dict[str, dict[str, float]] = {}  # GPU uid → unattributed parts before anyone used it

    def fold(
        self, entity: Entity, values: Mapping[str, float], at: float, samples: Mapping[str, Samples] | None = None
    ) -> None:
        """Fold the values of one new read of ``entity`` that finished at monotonic time ``at``, with
        the driver's samples of rows since the previous read where the backend has them."""
        if entity.kind in ("pod", "job"):
            self._allocations[entity.uid] = at
        for spec in self._rows:
            if entity.kind not in spec.entities or isinstance(spec.derive, Share):
                continue
            acc = self._state.setdefault((entity.uid, spec.key), _Accumulator())
            derive = spec.derive
            series = samples.get(derive.inputs[0]) if samples and derive is not None and derive.inputs else None
            if series is not None and isinstance(derive, Integral | IdleWhileHeld):
                self._sampled(acc, derive, series, values, at)
                continue
            acc.sample_at = None
            if isinstance(derive, Integral):
                self._integrate(acc, values.get(derive.of), at)
            elif isinstance(derive, IdleWhileHeld):
                self._idle(acc, derive, values.get(derive.utilization), values.get(derive.holders), at)
            elif isinstance(derive, IdleWhileAllocated):
                self._wasted(acc, derive, values.get(derive.utilization), values.get(derive.holders), at)
            elif isinstance(derive, Constant):
                acc.total, acc.at = derive.value, at

    def split(self, values: Mapping[Entity, Mapping[str, float]], at: float) -> None:
        """Fold one GPU read (its GPU, MIG, process and allocation entities, already folded one by one)
        into the ledger rows: each allocation's part of the interval since the GPU's previous read
        (:func:`~gpu_exporter.sampling.ledger.split`); the first read, or one after more than the
        stale limit, is a baseline (parts of 0)."""
        gpu = next((entity for entity in values if entity.kind == "gpu"), None)
        if gpu is None or not self._shares:
            return
        busy, energy = self.values(gpu).get(UTILIZATION_SECONDS), values[gpu].get(ENERGY)
        previous = self._ledger.get(gpu.uid)
        self._ledger[gpu.uid] = (at, busy, energy)
        seconds, busy_part, energy_part = 0.0, None if busy is None else 0.0, None if energy is None else 0.0
        if previous is not None and 0 < at - previous[0] <= self._cap:
            seconds = at - previous[0]
            busy_part = busy - previous[1] if busy is not None and previous[1] is not None else None
            energy_part = energy - previous[2] if energy is not None and previous[2] is not None else None
            if energy_part is not None and energy_part < 0:
                energy_part = None  # the driver's counter restarted (a reload): no guess
        allocations, processes = holdings(values)
        parts = split(Interval(seconds, busy_part, energy_part, allocations, processes))
        for part in ("allocated", "busy", "energy", "sm"):
            for uid, amount in getattr(parts, part).items():
                self._add(uid, part, amount, at)
        for uid in allocations:
            self._set(uid, "memory", parts.memory.get(uid), at)
            self._set(uid, "memory_peak", parts.memory_peak.get(uid), at)
        # A GPU's unattributed series begin once it has had a process or an allocation (a GPU no one
        # uses says nothing new by them), holding all it did before then: the parts add up to its totals.
        pending = self._unseen.setdefault(gpu.uid, {})
        for part, amount in (("unattributed_busy", parts.unattributed_busy),
                             ("unattributed_energy", parts.unattributed_energy)):  # fmt: skip
            if amount is not None:
                pending[part] = pending.get(part, 0.0) + amount
        unattributed = [self._shares.get(part) for part in ("unattributed_busy", "unattributed_energy")]
        if allocations or processes or any((gpu.uid, key) in self._state for key in unattributed):  # once seen, kept
            for part, amount in pending.items():
                self._add(gpu.uid, part, amount, at)
            pending.clear()

    def _add(self, uid: str, part: str, amount: float, at: float) -> None:
        key = self._shares.get(part)
        if key is not None:
            acc = self._state.setdefault((uid, key), _Accumulator())
            acc.total, acc.at = (acc.total or 0.0) + amount, at

    def _set(self, uid: str, part: str, value: float | None, at: float) -> None:
        key = self._shares.get(part)
        if key is not None:
            self._state[(uid, key)] = _Accumulator(value, at)

    def _elapsed(self, acc: _Accumulator, at: float) -> float:
        assert acc.at is not None
        return max(0.0, min(at - acc.at, self._cap))

    @staticmethod
    def _sampled(
        acc: _Accumulator, rule: Integral | IdleWhileHeld, series: Samples, values: Mapping[str, float], at: float
    ) -> None:
        """Credit each driver sample for the time since the previous one: its value (Integral), or the
        whole time when it lies on the counted side of the threshold with a holder present."""
        newest = max(acc.sample_at or series[-1][0], series[-1][0]) if series else acc.sample_at
        held = 1.0
        if isinstance(rule, IdleWhileHeld):
            holders = values.get(rule.holders)
            if holders is None:
                acc.total, acc.at, acc.sample_at = None, at, newest
                return
            held = 1.0 if holders >= 1 else 0.0
        if acc.at is None or acc.total is None:
            acc.total = 0.0  # the first read: a baseline (older samples came before the exporter)
        else:
            previous, total = acc.sample_at, acc.total
            integral = isinstance(rule, Integral)
            below, above = (0.0, False) if isinstance(rule, Integral) else (rule.below, rule.above)
            for t, value in series:  # a few hundred samples per GPU per read: the loop is kept lean
                if previous is None:
                    previous = t
                elif t > previous:
                    span = min(t - previous, SAMPLE_GAP_SECONDS)
                    if integral:
                        total += value * span
                    elif (value >= below) == above:
                        total += span * held
                    previous = t
            acc.total = total
        acc.at, acc.sample_at = at, newest

    def _integrate(self, acc: _Accumulator, value: float | None, at: float) -> None:
        if value is None:
            return
        if acc.total is None or acc.at is None:
            acc.total = 0.0
        else:
            acc.total += value * self._elapsed(acc, at)
        acc.at = at

    def _idle(
        self, acc: _Accumulator, rule: IdleWhileHeld, utilization: float | None, holders: float | None, at: float
    ) -> None:
        if utilization is None:
            return
        if acc.at is None:
            acc.total = 0.0 if holders is not None else None
        elif holders is None:
            pass  # the holders could not be read this time: no time counted, the total kept (never backwards)
        else:
            counted = (utilization >= rule.below) == rule.above
            idle = self._elapsed(acc, at) if counted and holders >= 1 else 0.0
            acc.total = (acc.total or 0.0) + idle
        acc.at = at

    def _wasted(
        self, acc: _Accumulator, rule: IdleWhileAllocated, utilization: float | None, holders: float | None, at: float
    ) -> None:
        """Time with no compute process (where the count is known) or utilization below the threshold."""
        if utilization is None:
            return
        if acc.at is None:
            acc.total = 0.0
        else:
            idle = utilization < rule.below or (holders is not None and holders < 1)
            acc.total = (acc.total or 0.0) + (self._elapsed(acc, at) if idle else 0.0)
        acc.at = at

    def values(self, entity: Entity) -> dict[str, float]:
        """The derived values of ``entity`` that exist."""
        out = {}
        for spec in self._rows:
            acc = self._state.get((entity.uid, spec.key))
            if acc is not None and acc.total is not None:
                out[spec.key] = acc.total
        return out

    def reset(self, uid: str) -> None:
        """Forget every integrator of entity ``uid`` (it was lost)."""
        for key in [key for key in self._state if key[0] == uid]:
            del self._state[key]
        self._ledger.pop(uid, None)
        self._unseen.pop(uid, None)

    def forget_allocations(self, before: float) -> None:
        """Forget the pods and jobs last seen before monotonic time ``before``: pods and jobs come and
        go for good, and their state would otherwise grow with every one ever seen."""
        for uid in [uid for uid, at in self._allocations.items() if at < before]:
            del self._allocations[uid]
            self.reset(uid)


class Windows:
    """The clock-event reasons active in each read of a GPU, kept for an hour: (Unix time, active
    reasons) per read that carried the windowed rows, by entity uid. dcgm-exporter's
    DCGM_EXP_CLOCK_EVENTS_COUNT counts, per reason, the stored samples of its window with the
    reason's bit set; these are the samples it counts."""

    def __init__(self, specs: Sequence[MetricSpec], memory_seconds: float = WINDOW_MEMORY_SECONDS) -> None:
        """``memory_seconds``: how long samples are kept (the longest window anyone counts over, at
        most an hour); 0 keeps none, where nothing reads them (native names)."""
        memory = min(memory_seconds, WINDOW_MEMORY_SECONDS)
        rows = {spec.key: spec.variant[0][1] for spec in specs if spec.name in WINDOWED_FAMILIES and spec.variant}
        self._rows = rows if memory > 0 else {}
        self._memory = memory
        self._samples: dict[str, deque[tuple[float, frozenset[str]]]] = {}
        self._copies: dict[str, tuple[tuple[float, frozenset[str]], ...]] = {}
        self._sets: dict[frozenset[str], frozenset[str]] = {}  # one object per distinct set of reasons

    def note(self, uid: str, values: Mapping[str, float], now: float) -> None:
        """Remember the reasons active in this read (wall time ``now``, Unix seconds); a read without
        any of the windowed rows (not due, or unsupported) is no sample."""
        if not self._rows or not any(key in values for key in self._rows):
            return
        active = frozenset(reason for key, reason in self._rows.items() if values.get(key) == 1)
        active = self._sets.setdefault(active, active)
        samples = self._samples.setdefault(uid, deque())
        samples.append((now, active))
        while samples and samples[0][0] < now - self._memory:
            samples.popleft()
        self._copies.pop(uid, None)

    def snapshot(self) -> dict[str, tuple[tuple[float, frozenset[str]], ...]]:
        """Copies of the remembered samples, by uid, oldest first (a GPU not read since the last
        snapshot keeps its copy)."""
        for uid, samples in self._samples.items():
            if uid not in self._copies:
                self._copies[uid] = tuple(samples)
        return dict(self._copies)

    def forget(self, uid: str) -> None:
        self._samples.pop(uid, None)
        self._copies.pop(uid, None)
