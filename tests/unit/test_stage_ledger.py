"""The ledger in process: each allocation's part of a GPU's time, busy time and energy, from pure
intervals (:func:`split`) and from reads folded on a fake clock (:class:`Integrators`). Shares follow
the processes' SM activity exactly; the parts and the unattributed rest always add up to the GPU's
totals; a GPU held alone gives its allocation everything; a vanished allocation is forgotten after
the retention."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter import model
from gpu_exporter.catalogue import METRICS
from gpu_exporter.model import Entity
from gpu_exporter.sampling.derive import Integrators
from gpu_exporter.sampling.ledger import Holding, Interval, holdings, split

GPU = model.gpu(0, "GPU-0000")
MIG = model.mig(0, "GPU-0000", 1, 0, "1g.10gb", "MIG-1111", "NVIDIA H100 MIG 1g.10gb")
JOB_A, JOB_B = model.job(GPU, "slurm_job", "101"), model.job(GPU, "slurm_job", "202")
POD_A, POD_B = model.pod(GPU, "ml", "train-0", "main"), model.pod(GPU, "ml", "serve-0", "main")
UTIL, ENERGY, BUSY = "gpu_utilization_ratio", "gpu_energy_joules_total", "gpu_utilization_seconds_total"
SM, MEMORY = "gpu_process_sm_utilization_ratio", "gpu_process_memory_used_bytes"
A_BUSY, A_ENERGY = "gpu_allocation_busy_seconds_total", "gpu_allocation_energy_joules_total"
A_TIME, A_SM, A_MEMORY = (
    "gpu_allocation_gpu_seconds_total",
    "gpu_allocation_sm_seconds_total",
    "gpu_allocation_memory_used_bytes",
)
U_BUSY, U_ENERGY = "gpu_unattributed_busy_seconds_total", "gpu_unattributed_energy_joules_total"
CAP = 30.0


def _process(pid: int, parent: Entity = GPU, **workload: str) -> Entity:
    labels = model.workload(None, workload.get("pod_uid", ""), workload.get("slurm_job", ""))
    if "pod" in workload:
        labels = model.workload((workload["namespace"], workload["pod"], "main"), "", "")
    return model.named(model.process(parent, pid), "python", "alice", labels)


def test_busy_time_and_energy_follow_the_sm_shares_exactly() -> None:
    interval = Interval(
        8.0, 4.0, 2000.0, ("a", "b"), (Holding("a", 0.375, 1e9), Holding("b", 0.125, 3e9), Holding("a", 0.0, 1e9))
    )
    parts = split(interval)
    assert parts.busy == {"a": 3.0, "b": 1.0} and parts.unattributed_busy == 0.0
    # 50 % busy: 1000 J split 3:1, the idle 1000 J evenly by allocated time
    assert parts.energy == {"a": 750.0 + 500.0, "b": 250.0 + 500.0} and parts.unattributed_energy == 0.0
    assert parts.allocated == {"a": 4.0, "b": 4.0}
    assert parts.sm == {"a": 3.0, "b": 1.0} and parts.memory == {"a": 2e9, "b": 3e9}


def test_what_no_process_accounts_for_is_unattributed() -> None:
    parts = split(Interval(10.0, 5.0, 1000.0, ("a", "b"), (Holding("a", 0.2), Holding(None, 0.1), Holding("b", 0.1))))
    assert parts.busy == {"a": 2.0, "b": 1.0}
    assert parts.unattributed_busy == pytest.approx(2.0)  # 1 s of an unknown process, 1 s no sample explains
    assert parts.energy == {"a": 200.0 + 250.0, "b": 100.0 + 250.0}
    assert parts.unattributed_energy == pytest.approx(200.0)


def test_overlapping_shares_are_scaled_to_the_busy_time() -> None:
    parts = split(Interval(4.0, 2.0, None, ("a", "b"), (Holding("a", 0.75), Holding("b", 0.25))))
    assert parts.busy == {"a": 1.5, "b": 0.5} and parts.unattributed_busy == 0.0
    assert parts.energy == {} and parts.unattributed_energy is None  # unknown energy: absent, not 0


def test_a_gpu_held_alone_gives_its_allocation_everything() -> None:
    for processes in ((), (Holding("a", None),), (Holding("a", 0.1),)):
        parts = split(Interval(10.0, 9.0, 3000.0, ("a",), processes))
        assert parts.busy == {"a": 9.0} and parts.energy == {"a": 3000.0}
        assert parts.unattributed_busy == 0.0 and parts.unattributed_energy == 0.0
    parts = split(Interval(10.0, 9.0, 3000.0, ("a",), (Holding(None, 0.5),)))  # someone else's process
    assert parts.busy == {"a": 0.0} and parts.unattributed_busy == 9.0  # not its own: no guess
    assert parts.energy == {"a": pytest.approx(300.0)}  # only the idle part, by allocated time


def test_without_allocations_everything_is_unattributed() -> None:
    parts = split(Interval(10.0, 4.0, 500.0, (), (Holding(None, 0.4),)))
    assert parts.busy == {} and parts.unattributed_busy == 4.0 and parts.unattributed_energy == 500.0


@given(
    st.floats(0.1, 60.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1e5),
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.one_of(st.none(), st.floats(0.0, 1.0))), max_size=8),
    st.integers(0, 3),
)
def test_the_parts_always_add_up_to_the_gpu_totals(
    seconds: float, util: float, energy: float, processes: list[tuple[str | None, float | None]], count: int
) -> None:
    allocations = ("a", "b", "c")[:count]
    parts = split(Interval(seconds, util * seconds, energy, allocations, tuple(Holding(a, s) for a, s in processes)))
    assert parts.unattributed_busy is not None and parts.unattributed_energy is not None
    assert sum(parts.busy.values()) + parts.unattributed_busy == pytest.approx(util * seconds, rel=1e-9, abs=1e-9)
    assert sum(parts.energy.values()) + parts.unattributed_energy == pytest.approx(energy, rel=1e-9, abs=1e-6)
    assert all(v >= 0 for v in (*parts.busy.values(), *parts.energy.values()))
    assert sum(parts.allocated.values()) == pytest.approx(seconds if allocations else 0.0)


def test_processes_are_matched_to_their_allocation() -> None:
    values = {
        GPU: {},
        JOB_A: {},
        POD_A: {},
        _process(1, slurm_job="101"): {SM: 0.5},
        _process(2, namespace="ml", pod="train-0"): {SM: 0.25, MEMORY: 5.0},
        _process(3, slurm_job="999"): {SM: 0.1},  # a job this GPU has no allocation of
        _process(4): {},  # two allocations here: no guess
    }
    allocations, processes = holdings(values)
    assert allocations == (JOB_A.uid, POD_A.uid)
    assert [p.allocation for p in processes] == [JOB_A.uid, POD_A.uid, None, None]
    hpc = model.job(MIG, "hpc_job", "h1")
    _, alone = holdings({MIG: {}, hpc: {}, _process(5, MIG): {SM: 0.3}})
    assert alone == (Holding(hpc.uid, 0.3, None),)  # the instance's only allocation
    pod_process = _process(6, pod_uid="0c7e2b54")
    _, in_pod = holdings({GPU: {}, POD_A: {}, pod_process: {SM: 0.5}})
    assert in_pod == (Holding(POD_A.uid, 0.5, None),)  # pod-resources names no UID: the GPU's one pod
    known = model.pod(GPU, "ml", "train-0", "main", info=model.pod_info("ffff", {}))
    for other in (JOB_A, known):  # a pod's process is no job's, nor a pod's of another UID
        assert holdings({GPU: {}, other: {}, pod_process: {SM: 0.5}})[1] == (Holding(None, 0.5, None),)
    assert holdings({GPU: {}, JOB_B: {}, _process(7, slurm_job="101"): {}})[1] == (Holding(None),)
    assert holdings({GPU: {}, JOB_B: {}, _process(8): {}})[1] == (Holding(None),)  # a Slurm job claims no other


def _read(integrators: Integrators, at: float, util: float, energy: float, sm_a: float, sm_b: float) -> None:
    """One read of a GPU shared by two Slurm jobs, each with one process at the given SM ratio."""
    values: dict[Entity, dict[str, float]] = {
        GPU: {UTIL: util, ENERGY: energy},
        JOB_A: {},
        JOB_B: {},
        _process(11, slurm_job="101"): {SM: sm_a, MEMORY: 2e9},
        _process(12, slurm_job="202"): {SM: sm_b, MEMORY: 1e9},
    }
    for entity, own in values.items():
        integrators.fold(entity, values[GPU] if entity.kind == "job" else own, at)
    integrators.split(values, at)


def test_reads_on_a_fake_clock_add_up_to_the_device_counters() -> None:
    integrators = Integrators(METRICS, CAP)
    energy = 1000.0
    for step in range(61):  # a minute of reads every second, 3:1 SM shares, 80 % busy, 300 W
        _read(integrators, 100.0 + step, 0.8, energy, 0.6, 0.2)
        energy += 300.0
    gpu, a, b = integrators.values(GPU), integrators.values(JOB_A), integrators.values(JOB_B)
    assert gpu[BUSY] == pytest.approx(48.0)
    assert a[A_BUSY] / b[A_BUSY] == pytest.approx(3.0)
    assert a[A_BUSY] + b[A_BUSY] + gpu[U_BUSY] == pytest.approx(gpu[BUSY], rel=0.01)
    assert a[A_ENERGY] + b[A_ENERGY] + gpu[U_ENERGY] == pytest.approx(60 * 300.0, rel=0.01)
    assert a[A_ENERGY] == pytest.approx(60 * (240 * 0.75 + 30)) and b[A_ENERGY] == pytest.approx(60 * (240 * 0.25 + 30))
    assert a[A_TIME] == b[A_TIME] == pytest.approx(30.0)
    assert a[A_SM] == pytest.approx(36.0) and b[A_MEMORY] == 1e9


def test_a_vanished_allocation_is_forgotten_after_the_retention_and_counters_never_go_back() -> None:
    integrators = Integrators(METRICS, CAP)
    _read(integrators, 0.0, 0.5, 0.0, 0.25, 0.25)
    _read(integrators, 1.0, 0.5, 100.0, 0.25, 0.25)
    before = integrators.values(JOB_A)[A_BUSY]
    values: dict[Entity, dict[str, float]] = {GPU: {UTIL: 0.5, ENERGY: 200.0}, JOB_B: {}}
    for entity, own in values.items():
        integrators.fold(entity, values[GPU] if entity.kind == "job" else own, 2.0)
    integrators.split(values, 2.0)
    assert integrators.values(JOB_B)[A_BUSY] > 0.25  # now alone: the whole GPU
    assert integrators.values(JOB_A)[A_BUSY] == before  # kept while within the retention
    integrators.forget_allocations(2.0)
    assert integrators.values(JOB_A) == {} and integrators.values(JOB_B) != {}


def test_a_gpu_without_processes_or_allocations_has_no_ledger_series() -> None:
    integrators = Integrators(METRICS, CAP)
    for at in (0.0, 1.0):
        integrators.fold(GPU, {UTIL: 0.5, ENERGY: at * 100}, at)
        integrators.split({GPU: {UTIL: 0.5, ENERGY: at * 100}}, at)
    assert U_BUSY not in integrators.values(GPU) and U_ENERGY not in integrators.values(GPU)
    _read(integrators, 2.0, 0.5, 300.0, 0.125, 0.125)  # two jobs arrive: from now on, the parts add up
    _read(integrators, 3.0, 0.5, 400.0, 0.125, 0.125)
    gpu, a, b = integrators.values(GPU), integrators.values(JOB_A), integrators.values(JOB_B)
    assert gpu[U_BUSY] + a[A_BUSY] + b[A_BUSY] == pytest.approx(gpu[BUSY])  # all of it since the first read
    assert gpu[U_ENERGY] + a[A_ENERGY] + b[A_ENERGY] == pytest.approx(400.0)


PEAK, A_PEAK = "gpu_process_memory_peak_bytes", "gpu_allocation_memory_peak_bytes"


def test_peak_memory_is_the_largest_of_its_processes_peaks_where_accounting_gives_them() -> None:
    """NVML accounting's per-process maximum since start: an allocation's peak is its processes' largest
    (not their sum, not per interval); an allocation whose processes have none (accounting off) has no
    peak, and its memory at the read stays."""
    held = (Holding("a", 0.1, 1e9, 3e9), Holding("a", 0.1, 2e9, 2.5e9), Holding("b", 0.1, 4e9), Holding(None, 0, 1, 9))
    parts = split(Interval(1.0, 0.5, 100.0, ("a", "b"), held))
    assert parts.memory_peak == {"a": 3e9} and parts.memory == {"a": 3e9, "b": 4e9}
    values = {
        GPU: {UTIL: 0.5, ENERGY: 10.0},
        JOB_A: {},
        JOB_B: {},
        _process(11, slurm_job="101"): {MEMORY: 2e9, PEAK: 6e9},
        _process(12, slurm_job="202"): {MEMORY: 1e9},
    }
    assert [p.peak for p in holdings(values)[1]] == [6e9, None]
    integrators = Integrators(METRICS, CAP)
    for entity, own in values.items():
        integrators.fold(entity, values[GPU] if entity.kind == "job" else own, 5.0)
    integrators.split(values, 5.0)
    assert integrators.values(JOB_A)[A_PEAK] == 6e9 and A_PEAK not in integrators.values(JOB_B)
    assert integrators.values(JOB_B)[A_MEMORY] == 1e9
