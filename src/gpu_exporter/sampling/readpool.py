"""A few long-lived threads that run the GPU workers' reads in turn, one of them unless reads queue up.

A thread per GPU woken every cycle costs a thread hand-off per GPU, twice (trigger, then the
sampler woken by the result), and threads woken together spend CPU handing the GIL to each other
(every NVML call releases and takes it again). Here one thread drains the queue of a cycle's reads
while they are quick; only the reads that finish with nothing left queued wake the sampler.

The pool widens only when reads stay queued: each :meth:`ReadPool.check` (the sampler calls it
every ``slow_after`` seconds while it waits) that finds reads still queued wakes one more thread,
up to ``size`` draining at once, so slow driver calls on a big host still overlap. A read that
hangs keeps its thread, as a GPU's own thread would: once it has run ``slow_after`` seconds it no
longer counts, and the next check wakes or starts another thread so the queue keeps moving. A hung
GPU is not triggered again until its read returns (its worker stays busy), so threads stay bounded
by ``size`` plus the reads hung at once. A thread that finds the queue empty ends when another
already waits idle or more than ``size`` threads exist: one waits for the next cycle, so a widened
pool goes back to a single thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.sampling.worker import Worker


@dataclass
class _Reader:
    """One pool thread: ``wake`` set to send it draining; ``since`` the monotonic start of its
    current read (None between reads); ``idle`` while it waits for ``wake``."""

    wake: threading.Event = field(default_factory=threading.Event)
    since: float | None = None
    idle: bool = False


class ReadPool:
    """Runs submitted workers' :meth:`Worker.execute` on pool threads, one draining the queue and
    more (up to ``size`` not stuck) while reads stay queued; ``done`` is notified when a read
    finishes with nothing queued."""

    def __init__(self, size: int, slow_after: float, done: threading.Condition, name: str = "gpu-reader") -> None:
        self._size = size
        self._slow_after = slow_after
        self._done = done
        self._name = name
        self._lock = threading.Lock()
        self._queued: deque[Worker[Any]] = deque()
        self._readers: dict[int, _Reader] = {}  # thread number → its state
        self._idle: list[int] = []  # idle thread numbers, the last to go idle woken first
        self._serial = 0
        self._stopping = False

    def submit(self, worker: Worker[Any]) -> None:
        """Queue ``worker``'s read; wake a thread only when none that is not stuck is draining."""
        with self._lock:
            self._queued.append(worker)
            if not self._stopping and self._draining() == 0:
                self._wake_one()

    def check(self) -> None:
        """While reads are queued, wake one more thread (up to ``size`` draining that are not stuck
        in a read longer than ``slow_after``)."""
        with self._lock:
            if self._queued and not self._stopping and self._draining() < self._size:
                self._wake_one()

    def threads(self) -> int:
        """Threads alive now (for tests and self-checks)."""
        with self._lock:
            return len(self._readers)

    def stop(self) -> None:
        """End the idle threads now and the others when their read returns; queued reads are dropped."""
        with self._lock:
            self._stopping = True
            dropped = list(self._queued)
            self._queued.clear()
            for number in self._idle:
                self._readers[number].wake.set()
            self._idle.clear()
        for worker in dropped:
            worker.stop()
            worker.execute()  # a stopped worker only clears its busy mark

    def _draining(self) -> int:
        """Under the lock: threads draining the queue and not stuck in a slow read."""
        now = time.monotonic()
        return sum(
            1
            for reader in self._readers.values()
            if not reader.idle and (reader.since is None or now - reader.since < self._slow_after)
        )

    def _wake_one(self) -> None:
        """Under the lock: send the most recently idle thread draining, or start one."""
        if self._idle:
            reader = self._readers[self._idle.pop()]
            reader.idle = False
            reader.wake.set()
            return
        self._serial += 1
        number = self._serial
        self._readers[number] = _Reader()
        threading.Thread(target=self._run, args=(number,), name=f"{self._name}-{number}", daemon=True).start()

    def _run(self, number: int) -> None:
        reader = self._readers[number]
        thread = threading.current_thread()
        while True:
            with self._lock:
                if self._stopping or (not self._queued and (self._idle or len(self._readers) > self._size)):
                    del self._readers[number]
                    return
                if not self._queued:
                    reader.idle = True
                    reader.wake.clear()
                    self._idle.append(number)
                    worker = None
                else:
                    worker = self._queued.popleft()
                    reader.since = time.monotonic()
            if worker is None:
                reader.wake.wait()
                continue
            thread.name = worker.name  # a hung read shows as its GPU's in logs and thread dumps
            worker.execute()
            thread.name = f"{self._name}-{number}"
            with self._lock:
                reader.since = None
                last = not self._queued
            if last:
                with self._done:
                    self._done.notify_all()
