"""Which rows each read asks for: the only place a row's cadence (``every``) is interpreted.

A row's ``every`` above 1 is in seconds: it is read every ``max(1, round(every / interval))``
cycles, so a near-static value is read about once a minute whatever the interval (``every = 1``:
every cycle). A row is due in cycle ``c`` when ``c`` is a multiple of its cycles; between its reads
the pipeline keeps its last value, served while younger than its cycles + 2 intervals (other rows:
``STALE_INTERVALS``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpu_exporter.backends.base import Request
from gpu_exporter.catalogue import SAMPLE_MEANS, MetricSpec

#: A value is current while its read finished at most this many intervals ago.
STALE_INTERVALS = 3


class Plan:
    """The rows one backend reads for each root kind, and how long each value stays current."""

    def __init__(self, specs: Sequence[MetricSpec], backend: str, interval: float = 1.0) -> None:
        #: The rows this backend can read (derived rows and rows it has no source for left out).
        self.readable = tuple(spec for spec in specs if spec.derive is None and spec.source(backend) is not None)
        self._by_root = {root: tuple(spec for spec in self.readable if spec.root == root) for root in ("gpu", "fabric")}
        # every = 1 is every cycle, however short; a slower row keeps its pace in seconds
        self._cycles = {
            spec.key: 1 if spec.every <= 1 else max(1, round(spec.every / interval)) for spec in self.readable
        }
        #: Row key → the cycles between its reads, for rows not read every cycle.
        self.slow: dict[str, int] = {key: cycles for key, cycles in self._cycles.items() if cycles > 1}
        self._everys = {
            root: sorted({self._cycles[spec.key] for spec in specs}) for root, specs in self._by_root.items()
        }
        # Due rows by (root, which cadences are due): every read of a cycle, and every cycle of the same
        # pattern, gets the same tuple, so a backend can keep what it derives from one (by identity).
        self._due: dict[tuple[str, tuple[bool, ...] | None], tuple[MetricSpec, ...]] = {}
        self._slow_everys = sorted(set(self.slow.values()))
        self._slow_due: dict[tuple[bool, ...] | None, tuple[str, ...]] = {}
        #: The rows whose driver samples a derivation integrates (the first input, as derive reads them), or
        #: whose value is their mean (convert).
        self.sampled = frozenset(spec.derive.inputs[0] for spec in specs if spec.derive and spec.derive.inputs) | {
            spec.key for spec in specs if spec.key in SAMPLE_MEANS
        }

    def wants(self, root: str) -> bool:
        """True when any row is read from roots of this kind (``gpu`` or ``fabric``)."""
        return bool(self._by_root[root])

    def request(self, root: str, cycle: int, asks: Callable[[str, str], bool], everything: bool = False) -> Request:
        """The rows of ``root`` due in ``cycle`` (all of them with ``everything``: a root's first read)."""
        pattern = None if everything else tuple(cycle % every == 0 for every in self._everys[root])
        due = self._due.get((root, pattern))
        if due is None:
            due = self._due[(root, pattern)] = tuple(
                spec for spec in self._by_root[root] if everything or cycle % self._cycles[spec.key] == 0
            )
        return Request(cycle, due, asks, self.sampled)

    def slow_due(self, cycle: int, everything: bool = False) -> tuple[str, ...]:
        """The slow-cadence row keys asked for in ``cycle`` (all of them in a root's first read)."""
        pattern = None if everything else tuple(cycle % every == 0 for every in self._slow_everys)
        due = self._slow_due.get(pattern)
        if due is None:
            due = self._slow_due[pattern] = tuple(
                key for key, every in self.slow.items() if everything or cycle % every == 0
            )
        return due

    def due(self, key: str, cycle: int) -> bool:
        """Whether the row ``key`` was asked for in ``cycle``."""
        return cycle % self.slow.get(key, 1) == 0

    def current_for(self, key: str) -> int:
        """How many intervals a value of ``key`` stays current after its read."""
        every = self.slow.get(key)
        return STALE_INTERVALS if every is None else every + 2
