"""The per-GPU process limit in process: beyond ``limit`` processes on one GPU or MIG instance, those
holding the least memory are folded into one ``pid="other"`` series whose values are the sums, so
every total is kept and each parent has at most ``limit + 1`` process series."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter import model
from gpu_exporter.backends.base import RawReading
from gpu_exporter.sampling.processes import fold

GPU = model.gpu(0, "GPU-0000")
MIG = model.mig(0, "GPU-0000", 1, 0, "1g.10gb", "MIG-1111", "NVIDIA H100 MIG 1g.10gb")
MEMORY, COUNT = "gpu_process_memory_used_bytes", "gpu_processes"


def _reading(parents: dict[model.Entity, list[float]]) -> RawReading:
    raw: dict[model.Entity, dict[str, float]] = {GPU: {"gpu_temperature_celsius": 40.0}}
    for parent, memories in parents.items():
        for pid, memory in enumerate(memories, start=100):
            raw[model.process(parent, pid, f"p{pid}", "root")] = {COUNT: 1.0, MEMORY: memory}
    return RawReading(raw)


def test_within_the_limit_nothing_changes() -> None:
    reading = _reading({GPU: [1.0, 2.0]})
    before = dict(reading.raw)
    fold(reading, 2)
    assert reading.raw == before


def test_the_smallest_processes_fold_into_one_other_series_per_parent() -> None:
    reading = _reading({GPU: [10.0, 30.0, 20.0, 5.0], MIG: [1.0, 2.0]})
    fold(reading, 2)
    by_pid = {(dict(e.info)["parent"], dict(e.labels)["pid"]): v for e, v in reading.raw.items() if e.kind == "process"}
    assert by_pid == {
        ("GPU-0000", "101"): {COUNT: 1.0, MEMORY: 30.0},  # the two largest keep their series
        ("GPU-0000", "102"): {COUNT: 1.0, MEMORY: 20.0},
        ("GPU-0000", "other"): {COUNT: 2.0, MEMORY: 15.0},  # sums: two processes, their memory
        ("MIG-1111", "100"): {COUNT: 1.0, MEMORY: 1.0},  # a parent within the limit is untouched
        ("MIG-1111", "101"): {COUNT: 1.0, MEMORY: 2.0},
    }
    other = next(e for e in reading.raw if dict(e.labels).get("pid") == "other")
    assert other.labels == (*GPU.labels, ("pid", "other"), ("process", ""), ("user", ""))
    assert other.uid == "GPU-0000/pidother"
    assert reading.raw[GPU] == {"gpu_temperature_celsius": 40.0}  # other entities stay as they were


def test_equal_memory_is_ranked_by_uid_so_the_fold_is_stable() -> None:
    first, second = _reading({GPU: [5.0, 5.0, 5.0]}), _reading({GPU: [5.0, 5.0, 5.0]})
    fold(first, 1)
    fold(second, 1)
    assert list(first.raw) == list(second.raw)
    assert [dict(e.labels)["pid"] for e in first.raw if e.kind == "process"] == ["100", "other"]


@given(
    st.lists(st.integers(min_value=0, max_value=2**40), max_size=25),
    st.lists(st.integers(min_value=0, max_value=2**40), max_size=25),
    st.integers(min_value=1, max_value=10),
)
def test_folding_keeps_every_total_and_bounds_the_series(gpu: list[int], mig: list[int], limit: int) -> None:
    reading = _reading({GPU: [float(m) for m in gpu], MIG: [float(m) for m in mig]})
    fold(reading, limit)
    for parent, memories in ((GPU, gpu), (MIG, mig)):
        mine = [v for e, v in reading.raw.items() if e.kind == "process" and dict(e.info)["parent"] == parent.uid]
        assert len(mine) == min(len(memories), limit + 1)
        assert sum(v[COUNT] for v in mine) == len(memories)
        assert sum(v[MEMORY] for v in mine) == sum(memories)  # integers below 2**53: exact
        kept = sorted(memories, reverse=True)[: limit if len(memories) > limit else len(memories)]
        assert sorted((v[MEMORY] for v in mine if v[COUNT] == 1.0), reverse=True)[: len(kept)] == kept
