"""The derive stage in process: integrators fold each read of an entity on the read's own monotonic
time (no clock is read, so nothing sleeps here). An ``Integral`` adds value × time since the previous
read, so any split of the same interval gives the same total; time is capped at the stale limit,
never negative, so a counter never goes backwards; a counter starts at 0 at its entity's first read
and is absent before it; ``reset`` (the entity was lost) restarts only that entity's counters."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter import model
from gpu_exporter.catalogue import METRICS
from gpu_exporter.sampling.derive import WINDOW_MEMORY_SECONDS, Integrators, Windows

UTIL, HOLDERS = "gpu_utilization_ratio", "gpu_compute_processes"
BUSY = "gpu_utilization_seconds_total"
IDLE_HELD = "gpu_idle_while_allocated_seconds_total"
INFO, WASTED = "gpu_allocation_info", "gpu_allocation_idle_seconds_total"
CAP = 3.0  # the stale limit: three intervals of a second

GPU = model.gpu(0, "GPU-0000")
OTHER = model.gpu(1, "GPU-1111")
MIG = model.mig(0, "GPU-0000", 1, 0, "1g.10gb", "MIG-1111", "NVIDIA H100 MIG 1g.10gb")
POD = model.pod(GPU, "ml", "trainer-0", "main")
JOB = model.job(GPU, "slurm_job", "4242")


def _integrators() -> Integrators:
    return Integrators(METRICS, CAP)


def test_a_counter_starts_at_zero_at_the_first_read_and_is_absent_before() -> None:
    integrators = _integrators()
    assert integrators.values(GPU) == {}  # absence, not 0
    integrators.fold(GPU, {"gpu_temperature_celsius": 40.0}, 10.0)  # no utilization in this read
    assert BUSY not in integrators.values(GPU)
    integrators.fold(GPU, {UTIL: 0.8}, 11.0)
    assert integrators.values(GPU)[BUSY] == 0.0


def test_busy_time_is_exact_with_uneven_intervals() -> None:
    integrators = _integrators()
    for at, util in ((100.0, 0.5), (100.25, 1.0), (101.0, 0.25), (101.125, 0.0), (103.125, 0.75)):
        integrators.fold(GPU, {UTIL: util}, at)
    # each read's value over the time since the one before it (binary fractions: no rounding)
    assert integrators.values(GPU)[BUSY] == 1.0 * 0.25 + 0.25 * 0.75 + 0.0 * 0.125 + 0.75 * 2.0


@given(
    st.floats(min_value=0.0, max_value=1.0),
    st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=40),
    st.floats(min_value=0.0, max_value=1e6),
)
def test_any_split_of_the_same_interval_gives_the_same_busy_time(util: float, gaps_ms: list[int], start: float) -> None:
    """A constant utilization read at any (uneven) times within the cap: value × the whole interval."""
    integrators = _integrators()
    integrators.fold(GPU, {UTIL: util}, start)
    for at in itertools.accumulate(gaps_ms, initial=0):
        if at:
            integrators.fold(GPU, {UTIL: util}, start + at / 1000)
    assert integrators.values(GPU)[BUSY] == pytest.approx(util * sum(gaps_ms) / 1000, rel=1e-9, abs=1e-9)


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0)), st.floats(-1e3, 1e3)),
        min_size=1,
        max_size=30,
    )
)
def test_busy_time_never_goes_backwards_and_never_gains_more_than_the_cap_per_read(
    reads: list[tuple[float | None, float]],
) -> None:
    """Out-of-order or repeated read times, gaps longer than the cap, reads without the value."""
    integrators = _integrators()
    before = None
    for util, at in reads:
        integrators.fold(GPU, {} if util is None else {UTIL: util}, at)
        now = integrators.values(GPU).get(BUSY)
        if before is not None:
            assert now is not None and before <= now <= before + CAP
        before = now


def test_a_gap_longer_than_the_stale_limit_is_credited_only_the_limit() -> None:
    integrators = _integrators()
    integrators.fold(GPU, {UTIL: 1.0}, 0.0)
    integrators.fold(GPU, {UTIL: 1.0}, 600.0)  # unreachable for ten minutes
    assert integrators.values(GPU)[BUSY] == CAP
    integrators.fold(GPU, {UTIL: 1.0}, 599.0)  # a read that finished earlier: no time at all
    assert integrators.values(GPU)[BUSY] == CAP


def test_a_read_without_the_value_leaves_the_counter_and_its_time_alone() -> None:
    integrators = _integrators()
    integrators.fold(GPU, {UTIL: 0.5}, 0.0)
    integrators.fold(GPU, {UTIL: 0.5}, 1.0)
    integrators.fold(GPU, {"gpu_temperature_celsius": 40.0}, 2.0)  # utilization not read this time
    assert integrators.values(GPU)[BUSY] == 0.5  # still served, unchanged
    integrators.fold(GPU, {UTIL: 0.5}, 3.0)  # the next value covers the time since the last one
    assert integrators.values(GPU)[BUSY] == 1.5


def test_reset_restarts_only_the_lost_entity() -> None:
    integrators = _integrators()
    for at in (0.0, 1.0, 2.0):
        integrators.fold(GPU, {UTIL: 1.0, HOLDERS: 1.0}, at)
        integrators.fold(OTHER, {UTIL: 1.0}, at)
    integrators.reset(GPU.uid)  # GPU 0 lost
    assert integrators.values(GPU) == {}  # its counters are absent while it is lost
    assert integrators.values(OTHER) == {BUSY: 2.0}  # another GPU's loss resets nothing of GPU 1's
    integrators.fold(GPU, {UTIL: 1.0, HOLDERS: 1.0}, 10.0)
    back = integrators.values(GPU)  # back: a counter reset, every derived row from 0
    assert back[BUSY] == back[IDLE_HELD] == 0.0 and set(back.values()) == {0.0}


def test_rows_apply_only_to_the_kinds_they_describe() -> None:
    integrators = _integrators()
    for at in (0.0, 1.0):
        integrators.fold(MIG, {UTIL: 1.0, HOLDERS: 1.0}, at)
        integrators.fold(POD, {UTIL: 1.0, HOLDERS: 1.0}, at)
    assert integrators.values(MIG) == {}
    assert set(integrators.values(POD)) == {INFO, WASTED}


def test_idle_while_held_counts_time_below_the_threshold_with_a_process_present() -> None:
    integrators = _integrators()
    integrators.fold(GPU, {UTIL: 0.0, HOLDERS: 1.0}, 0.0)
    assert integrators.values(GPU)[IDLE_HELD] == 0.0
    integrators.fold(GPU, {UTIL: 0.04, HOLDERS: 2.0}, 1.0)  # idle, held: counts
    integrators.fold(GPU, {UTIL: 0.05, HOLDERS: 2.0}, 2.0)  # at the threshold: busy enough
    integrators.fold(GPU, {UTIL: 0.0, HOLDERS: 0.0}, 3.5)  # idle but nobody holds it
    integrators.fold(GPU, {UTIL: 0.01, HOLDERS: 1.0}, 4.0)  # idle and held again: half a second
    assert integrators.values(GPU)[IDLE_HELD] == 1.5


def test_idle_while_held_is_absent_where_the_holders_cannot_be_read() -> None:
    integrators = _integrators()
    integrators.fold(GPU, {UTIL: 0.0}, 0.0)
    integrators.fold(GPU, {UTIL: 0.0}, 1.0)
    assert IDLE_HELD not in integrators.values(GPU) and BUSY in integrators.values(GPU)


def test_idle_while_held_never_goes_backwards_over_a_read_that_missed_the_holders() -> None:
    """Counters never go backwards but when the exporter restarts (or the GPU is lost): a single
    failed process-list read must not restart the idle counter from 0."""
    integrators = _integrators()
    for at in (0.0, 1.0, 2.0):
        integrators.fold(GPU, {UTIL: 0.0, HOLDERS: 1.0}, at)
    assert integrators.values(GPU)[IDLE_HELD] == 2.0
    integrators.fold(GPU, {UTIL: 0.0}, 3.0)  # the process list failed once
    assert integrators.values(GPU)[IDLE_HELD] == 2.0  # the unknown second is not counted, the total kept
    integrators.fold(GPU, {UTIL: 0.0, HOLDERS: 1.0}, 4.0)
    assert integrators.values(GPU)[IDLE_HELD] == 3.0


def test_pods_and_jobs_gone_for_the_retention_are_forgotten() -> None:
    """A pod's or job's integrators go once it has not been seen for the retention time (they would
    grow with every pod ever seen), while its GPU's and a pod still seen stay."""
    integrators = _integrators()
    integrators.fold(GPU, {UTIL: 0.0, HOLDERS: 1.0}, 0.0)
    integrators.fold(POD, {UTIL: 0.0, HOLDERS: 1.0}, 0.0)
    integrators.fold(JOB, {UTIL: 0.0, HOLDERS: 1.0}, 0.0)
    integrators.fold(JOB, {UTIL: 0.0, HOLDERS: 1.0}, 10.0)
    integrators.fold(GPU, {UTIL: 0.0, HOLDERS: 1.0}, 10.0)
    integrators.forget_allocations(5.0)
    assert integrators.values(POD) == {}
    assert integrators.values(JOB) and integrators.values(GPU)


def test_an_allocation_is_wasted_while_its_gpu_runs_nothing_or_nearly_nothing() -> None:
    integrators = _integrators()
    for entity in (POD, JOB):  # folded with its GPU's values, as the sampler does
        integrators.fold(entity, {UTIL: 0.9, HOLDERS: 1.0}, 0.0)
        integrators.fold(entity, {UTIL: 0.9, HOLDERS: 0.0}, 1.0)  # busy, but no compute process: wasted
        integrators.fold(entity, {UTIL: 0.01, HOLDERS: 3.0}, 3.0)  # processes, nearly idle: wasted
        integrators.fold(entity, {UTIL: 0.5, HOLDERS: 3.0}, 3.25)  # working
        integrators.fold(entity, {UTIL: 0.0}, 4.25)  # process count unknown: utilization decides
        integrators.fold(entity, {HOLDERS: 0.0}, 5.0)  # no utilization: not folded at all
        assert integrators.values(entity) == {INFO: 1.0, WASTED: 1.0 + 2.0 + 1.0}


def test_an_allocation_is_absent_until_its_gpu_utilization_is_read() -> None:
    integrators = _integrators()
    integrators.fold(POD, {HOLDERS: 1.0}, 0.0)
    assert integrators.values(POD) == {INFO: 1.0}


def _reasons(*active: str) -> dict[str, float]:
    row = "gpu_clock_event_active{reason=%s}"
    return {row % reason: float(reason in active) for reason in ("power_cap", "hw_slowdown", "gpu_idle")}


def test_windows_keep_nothing_where_no_window_is_counted() -> None:
    windows = Windows(METRICS, 0.0)
    windows.note(GPU.uid, _reasons("power_cap"), 1000.0)
    assert windows.snapshot() == {}


def test_windows_keep_at_most_an_hour_and_forget_a_gpu() -> None:
    windows = Windows(METRICS, 10 * WINDOW_MEMORY_SECONDS)  # asked for more than an hour: an hour
    windows.note(GPU.uid, _reasons("power_cap"), 0.0)
    windows.note(GPU.uid, _reasons(), WINDOW_MEMORY_SECONDS)  # exactly an hour later: both kept
    windows.note(OTHER.uid, _reasons("hw_slowdown", "gpu_idle"), 5.0)
    assert [active for _, active in windows.snapshot()[GPU.uid]] == [frozenset({"power_cap"}), frozenset()]
    windows.note(GPU.uid, _reasons(), WINDOW_MEMORY_SECONDS + 0.5)
    assert [at for at, _ in windows.snapshot()[GPU.uid]] == [WINDOW_MEMORY_SECONDS, WINDOW_MEMORY_SECONDS + 0.5]
    windows.forget(GPU.uid)
    assert list(windows.snapshot()) == [OTHER.uid]
    assert windows.snapshot()[OTHER.uid] == ((5.0, frozenset({"hw_slowdown", "gpu_idle"})),)


def test_a_windows_snapshot_is_a_copy_later_reads_do_not_change() -> None:
    windows = Windows(METRICS)
    windows.note(GPU.uid, _reasons("power_cap"), 1.0)
    first = windows.snapshot()
    windows.note(GPU.uid, _reasons(), 2.0)
    assert len(first[GPU.uid]) == 1 and len(windows.snapshot()[GPU.uid]) == 2
