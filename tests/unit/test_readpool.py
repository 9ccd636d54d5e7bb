"""The read pool: one thread while reads are quick, at most ``size`` at once, hung reads replaced, threads bounded."""

from __future__ import annotations

import threading
import time

from gpu_exporter.sampling.readpool import ReadPool
from gpu_exporter.sampling.worker import Worker


def _until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_hung_reads_hold_only_their_threads_and_the_rest_go_on() -> None:
    done = threading.Condition()
    pool = ReadPool(2, 0.05, done)
    release = threading.Event()
    running: list[int] = []
    most = [0]
    lock = threading.Lock()

    def job(i: int) -> object:
        def read(cycle: int) -> int:
            with lock:
                running.append(i)
                most[0] = max(most[0], len([r for r in running if r >= 2]))
            if i < 2:
                release.wait(10)  # GPUs 0 and 1 hang
            else:
                time.sleep(0.01)
            with lock:
                running.remove(i)
            return cycle * 10 + i

        return read

    workers = [Worker(f"gpu{i}-reader", job(i), done, runs=pool) for i in range(6)]
    try:
        assert all(worker.trigger(1) for worker in workers)
        # Both threads are stuck in hung reads: the pool starts others once they count as slow.
        deadline = time.monotonic() + 5
        while any(worker.result is None for worker in workers[2:]):
            assert time.monotonic() < deadline, [worker.result for worker in workers]
            pool.check()
            time.sleep(0.01)
        assert [worker.result.value for worker in workers[2:]] == [12, 13, 14, 15]  # type: ignore[union-attr]
        assert most[0] <= 2  # never more than `size` reads that are not hung at once
        assert workers[0].busy_since is not None and workers[1].busy_since is not None
        assert not workers[0].trigger(2)  # a hung GPU is not triggered again
        _until(lambda: pool.threads() == 2)  # the two hung; the two started for them ended when nothing was queued
        release.set()
        _until(lambda: workers[0].result is not None and workers[1].result is not None)
        _until(lambda: pool.threads() <= 2)  # threads back from a hung read end while `size` others exist
        assert workers[0].trigger(2) and workers[2].trigger(2)
        _until(lambda: workers[0].result.cycle == 2 and workers[2].result.cycle == 2)  # type: ignore[union-attr]
        assert threading.current_thread().name not in {w.name for w in workers}
    finally:
        release.set()
        pool.stop()
    _until(lambda: pool.threads() == 0)


def test_a_pool_thread_reads_under_its_gpu_name() -> None:
    done = threading.Condition()
    pool = ReadPool(1, 0.05, done)
    names: list[str] = []
    worker = Worker("gpu7-reader", lambda cycle: names.append(threading.current_thread().name), done, runs=pool)
    try:
        assert worker.trigger(1)
        _until(lambda: worker.result is not None)
        assert names == ["gpu7-reader"]
    finally:
        pool.stop()


def test_stop_drops_queued_reads() -> None:
    done = threading.Condition()
    pool = ReadPool(1, 10.0, done)
    release = threading.Event()
    first = Worker("gpu0-reader", lambda cycle: release.wait(5), done, runs=pool)
    second = Worker("gpu1-reader", lambda cycle: cycle, done, runs=pool)
    assert first.trigger(1) and second.trigger(1)
    _until(lambda: pool.threads() == 1)
    pool.stop()
    assert second.busy_since is None and second.result is None  # dropped, not run
    release.set()
    _until(lambda: pool.threads() == 0)


def test_quick_reads_are_drained_by_one_thread() -> None:
    done = threading.Condition()
    pool = ReadPool(4, 0.05, done)
    names: set[str] = set()
    workers = [Worker(f"gpu{i}-reader", lambda cycle: cycle, done, runs=pool) for i in range(8)]
    try:
        for cycle in (1, 2, 3):
            assert all(worker.trigger(cycle) for worker in workers)
            _until(lambda: all(w.result is not None and w.result.cycle == cycle for w in workers))  # noqa: B023
            names.update(thread.name for thread in threading.enumerate() if thread.name.startswith("gpu-reader"))
        assert pool.threads() == 1  # no check found reads queued: nothing widened the pool
    finally:
        pool.stop()
    _until(lambda: pool.threads() == 0)


def test_reads_that_stay_queued_widen_the_pool_up_to_its_size() -> None:
    done = threading.Condition()
    pool = ReadPool(3, 1.0, done)  # no read here is slow enough to count as stuck
    lock = threading.Lock()
    running = [0]
    most = [0]

    def read(cycle: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.03)
        with lock:
            running[0] -= 1
        return cycle

    workers = [Worker(f"gpu{i}-reader", read, done, runs=pool) for i in range(12)]
    try:
        assert all(worker.trigger(1) for worker in workers)
        assert most[0] <= 1
        while any(worker.result is None for worker in workers):
            pool.check()  # the sampler's check while it waits: reads still queued wake one more thread
            time.sleep(0.01)
        assert most[0] == 3  # widened while reads stayed queued, never past `size`
        _until(lambda: pool.threads() == 1)  # with nothing queued, one thread waits for the next cycle
    finally:
        pool.stop()
    _until(lambda: pool.threads() == 0)
