"""Both NVML doubles in this process, under the unmodified pynvml: the C fake (``tests/fakenvml``,
loaded with ctypes) and the simulator (``gpu_exporter.simulate``). A test asks for one by name and
gets ``load(scenario)``, which makes pynvml use that double reading ``scenario``; the library pynvml
had before comes back when the test ends.

The C fake, once loaded, stays loaded in the process under its soname ``libnvidia-ml.so.1``: a later
``pynvml.nvmlInit`` in the same process without a library set would find it rather than fail. Its
time base (seconds since the first ``nvmlInit`` of the process) and the Xids it delivered are the
process's too, so a test stages times relative to a rewrite (``xid = 79@0`` with ``lost_after = 0``
is due at once), never to its own start.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pynvml
import pytest

from gpu_exporter.simulate import install
from tests.fakenvml.build import LIB_NAME

DOUBLES = ("C fake", "simulator")
Load = Callable[[Path], None]  # makes pynvml use a double reading this scenario


def _use(library: object) -> None:
    with pynvml.libLoadLock:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()  # symbols resolved against another library


@contextmanager
def nvml_double(name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Load]:
    """``load`` for the double ``name`` (one of :data:`DOUBLES`) while the block runs."""
    before = pynvml.nvmlLib

    def c_fake(scenario: Path) -> None:
        monkeypatch.setenv("FAKE_NVML_SCENARIO", str(scenario))  # read by the fake's nvmlInit (getenv)
        monkeypatch.delenv("FAKE_NVML_TRACE", raising=False)
        _use(ctypes.CDLL(str(request.getfixturevalue("fakenvml_dir") / LIB_NAME)))

    def simulator(scenario: Path) -> None:
        install(str(scenario))

    try:
        yield c_fake if name == "C fake" else simulator
    finally:
        _use(before)


def rewrite(path: Path, text: str) -> None:
    """Replace a scenario atomically (a double never reads it half written), with a later mtime."""
    old = path.stat().st_mtime_ns
    staging = path.with_suffix(".new")
    staging.write_text(text)
    os.utime(staging, ns=(old + 1_000_000, old + 1_000_000))
    os.replace(staging, path)
