"""The simulated NVML (``gpu_exporter.simulate``) installed under pynvml in this process for in-process
tests of the NVML backend, over a scenario file of the test's own (in the fake's format) and writing the
fake's call trace: the unmodified nvidia-ml-py over the pure-Python stand-in for ``libnvidia-ml.so.1``.
:func:`simulated` puts pynvml's previous library back (:func:`tests.unit.simhost.simulated`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpu_exporter.simulate import install
from tests.unit import simhost


def write_scenario(path: Path, text: str) -> None:
    """Replace the scenario file at once (a new inode, so the library sees the change at its next call)."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


@contextmanager
def simulated(scenario: Path, trace: Path | None = None) -> Iterator[None]:
    """pynvml over the simulated library reading ``scenario`` (its call trace in ``trace``) until the end."""
    with simhost.simulated():
        library = install(str(scenario), str(trace) if trace else None)
        try:
            yield
        finally:
            library.close_trace()


def traced_calls(trace: Path) -> list[str]:
    """The symbols of the trace's lines (one line per NVML call), in order."""
    if not trace.exists():
        return []
    return [line.split()[0] for line in trace.read_text().splitlines() if line.strip()]
