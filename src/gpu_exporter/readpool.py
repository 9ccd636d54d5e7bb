"""A few long-lived threads that run the GPU workers' reads in turn.

A thread per GPU woken every cycle costs a thread hand-off per GPU, twice (trigger, then the
sampler woken by the result), and dozens of threads woken together spend kernel time passing the
GIL around. Here at most ``size`` reads run at once, each thread taking the next queued worker as
it finishes one, and only the reads that finish with nothing left queued wake the sampler.

A read that hangs keeps its thread, as a GPU's own thread would: once a read has run
``slow_after`` seconds it no longer counts, and :meth:`ReadPool.check` (the sampler calls it while
it waits) starts another thread so the queue keeps moving. A hung GPU is not triggered again until
its read returns (the worker stays busy), so threads stay bounded by ``size`` plus the reads hung
at once; a thread that returns from a hung read while ``size`` others exist ends.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from gpu_exporter.worker import Worker


class ReadPool:
    """Runs submitted workers' :meth:`Worker.execute` on at most ``size`` threads that are not
    stuck; ``done`` is notified when a read finishes with nothing queued."""

    def __init__(self, size: int, slow_after: float, done: threading.Condition, name: str = "gpu-reader") -> None:
        self._size = size
        self._slow_after = slow_after
        self._done = done
        self._name = name
        self._lock = threading.Condition()
        self._queued: deque[Worker[Any]] = deque()
        self._reading_since: dict[int, float | None] = {}  # thread number → monotonic start of its read
        self._serial = 0
        self._stopping = False

    def submit(self, worker: Worker[Any]) -> None:
        """Queue ``worker``'s read; a thread takes it when one is free."""
        with self._lock:
            self._queued.append(worker)
            self._add_threads()
            self._lock.notify()

    def check(self) -> None:
        """Start threads in place of reads running longer than ``slow_after`` while reads are queued."""
        with self._lock:
            self._add_threads()

    def threads(self) -> int:
        """Threads alive now (for tests and self-checks)."""
        with self._lock:
            return len(self._reading_since)

    def stop(self) -> None:
        """End the idle threads now and the others when their read returns; queued reads are dropped."""
        with self._lock:
            self._stopping = True
            dropped = list(self._queued)
            self._queued.clear()
            self._lock.notify_all()
        for worker in dropped:
            worker.stop()
            worker.execute()  # a stopped worker only clears its busy mark

    def _add_threads(self) -> None:
        """Under the lock: enough threads that are idle or reading for less than ``slow_after``."""
        if not self._queued or self._stopping:
            return
        now = time.monotonic()
        usable = sum(1 for since in self._reading_since.values() if since is None or now - since < self._slow_after)
        for _ in range(min(self._size - usable, len(self._queued))):
            self._serial += 1
            number = self._serial
            self._reading_since[number] = None
            threading.Thread(target=self._run, args=(number,), name=f"{self._name}-{number}", daemon=True).start()

    def _run(self, number: int) -> None:
        while True:
            with self._lock:
                while not self._queued and not self._stopping and len(self._reading_since) <= self._size:
                    self._lock.wait()
                if self._stopping or not self._queued:  # stopping, or one thread more than needed
                    del self._reading_since[number]
                    return
                worker = self._queued.popleft()
                self._reading_since[number] = time.monotonic()
            thread = threading.current_thread()
            thread.name = worker.name  # a hung read shows as its GPU's in logs and thread dumps
            worker.execute()
            thread.name = f"{self._name}-{number}"
            with self._lock:
                self._reading_since[number] = None
                last = not self._queued
            if last:
                with self._done:
                    self._done.notify_all()
