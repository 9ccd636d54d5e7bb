"""A simulated ``libnvidia-ml.so.1`` as a Python object: pynvml resolves every C function with
``getattr(nvmlLib, name)``, so an object whose attributes are callables with the C ABI (see
:mod:`.abi`) stands in for the shared library. A function it does not implement raises
AttributeError, which pynvml reports as ``FUNCTION_NOT_FOUND``, as with an old driver.

The state mirrors the test fake's (``tests/fakenvml``): the scenario file is read at every
``nvmlInit*`` and read again by the next call after it changes; time is seconds since the first
successful init (monotonic); device calls run the same prologue (initialised, handle valid, GPU
present, ``delay.F``, ``lost_after``, ``error.F``) before their body.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gpu_exporter.simulate import errors
from gpu_exporter.simulate.scenario import MAX_GPUS, MAX_MIG, Scenario, load, parse_float, parse_uint, pick, stamp_of

log = logging.getLogger(__name__)

#: symbol → entry(library, symbol, *C arguments) -> nvmlReturn_t; filled by :mod:`.calls`.
EXPORTS: dict[str, Callable[..., Any]] = {}
_SLOTS = MAX_MIG + 1  # per GPU: the GPU's own handle, then one per MIG device


@dataclass
class EventSet:
    """One ``nvmlEventSet_t``: the event mask registered per GPU index."""

    masks: dict[int, int] = field(default_factory=dict)
    alive: bool = True
    memory: Any = None  # the bytes its address points at, kept alive with it


class Library:
    """The simulated NVML of one scenario file (``path``); ``trace``: a file that gets one line
    ``SYMBOL gpuN`` or ``SYMBOL -`` per call, as the test fake's ``FAKE_NVML_TRACE``."""

    def __init__(self, path: str | None, trace: str | None = None) -> None:
        self.path = path
        self.scenario = Scenario()
        self.lock = threading.Lock()
        self.refcount = 0
        self.t0: float | None = None
        self.delivered: set[tuple[int, int, int]] = set()  # (gpu, code, due in µs) of every Xid sent
        self.event_sets: dict[int, EventSet] = {}
        self._warned: set[str] = set()
        self._handles = (ctypes.c_char * (MAX_GPUS * _SLOTS))()
        self._base = ctypes.addressof(self._handles)
        self._trace = open(trace, "a", encoding="ascii") if trace else None  # noqa: SIM115  # lives as long as the library

    def __getattr__(self, name: str) -> Callable[..., Any]:
        entry = EXPORTS.get(name)
        if entry is None:
            raise AttributeError(name)

        def function(*args: Any) -> Any:
            return entry(self, name, *args)

        function.__name__ = name
        return function

    # --- warnings, trace, time -------------------------------------------------------------
    def warn_once(self, key: str, value: str, why: str) -> None:
        ident = f"{key}={value}"
        if ident not in self._warned:
            self._warned.add(ident)
            log.warning("simulated NVML: %s = %s: %s", key, value, why)

    def trace(self, symbol: str, gpu: int) -> None:
        if self._trace is not None:
            self._trace.write(f"{symbol} gpu{gpu}\n" if gpu >= 0 else f"{symbol} -\n")
            self._trace.flush()

    def close_trace(self) -> None:
        """Close the call trace (a library put aside in a process that goes on: in-process tests)."""
        if self._trace is not None:
            self._trace.close()
            self._trace = None

    def elapsed(self) -> float:
        """Seconds since the first successful ``nvmlInit*``."""
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    # --- the scenario ----------------------------------------------------------------------
    def init(self) -> int:
        """Read the file (UNKNOWN when it cannot be read), honour ``init.error``, start the clock."""
        with self.lock:
            if self.path is None:
                self.scenario = Scenario()
            else:
                try:
                    self.scenario = load(self.path)
                except (OSError, UnicodeDecodeError) as err:
                    log.warning("simulated NVML: cannot read scenario %s: %s", self.path, err)
                    return errors.UNKNOWN
                self._warn_skipped()
            forced = self.scenario.get("init.error")
            if forced is not None:
                code = self.error_value("init.error", forced, self.elapsed())
                if code != errors.SUCCESS:
                    return code
            if self.t0 is None:
                self.t0 = time.monotonic()
            self.refcount += 1
            return errors.SUCCESS

    def shutdown(self) -> int:
        with self.lock:
            if self.refcount == 0:
                return errors.UNINITIALIZED
            self.refcount -= 1
            return errors.SUCCESS

    def now(self) -> Scenario:
        """The current scenario, read again when the file's stamp changed; a file that cannot be
        read again keeps the previous scenario (under the new stamp, so it is not retried until it
        changes)."""
        current = self.scenario
        if self.path is None or stamp_of(self.path) == current.stamp:
            return current
        with self.lock:
            stamp = stamp_of(self.path)
            if stamp != self.scenario.stamp:
                try:
                    self.scenario = load(self.path)
                    self._warn_skipped()
                except (OSError, UnicodeDecodeError) as err:
                    log.warning("simulated NVML: cannot re-read %s (%s); keeping the previous one", self.path, err)
                    kept = Scenario(self.scenario.entries, self.scenario.gpus, stamp)
                    self.scenario = kept
            return self.scenario

    def _warn_skipped(self) -> None:
        for number, text in self.scenario.skipped:
            ident = f"{self.path}:{number}:{text}"
            if ident not in self._warned:
                self._warned.add(ident)
                log.warning("simulated NVML: %s:%d: no '=' in \"%s\"; line ignored", self.path, number, text)

    # --- values ----------------------------------------------------------------------------
    def uint_value(self, key: str, value: str | None, t: float) -> int | None:
        if value is None:
            return None
        number = parse_uint(pick(value, t))
        if number is None:
            self.warn_once(key, value, "not a non-negative number; treated as absent")
        return number

    def float_value(self, key: str, value: str | None, t: float) -> float | None:
        if value is None:
            return None
        number = parse_float(pick(value, t))
        if number is None:
            self.warn_once(key, value, "not a number; treated as absent")
        return number

    def error_value(self, key: str, value: str, t: float) -> int:
        code = errors.code_of(pick(value, t))
        if code is None:
            self.warn_once(key, value, "unknown NVML error name; using UNKNOWN")
            return errors.UNKNOWN
        return code

    def device_count(self, s: Scenario, t: float) -> int:
        explicit = self.uint_value("device_count", s.get("device_count"), t)
        if explicit is not None:
            return min(explicit, MAX_GPUS)
        return len(s.gpus)

    def present(self, s: Scenario, gpu: int, t: float) -> bool:
        """With ``device_count`` every index below it exists; otherwise gpuN exists while it has keys."""
        if not 0 <= gpu < min(MAX_GPUS, self.device_count(s, t)):
            return False
        return s.get("device_count") is not None or gpu in s.gpus

    # --- handles ---------------------------------------------------------------------------
    def handle(self, gpu: int, mig: int = -1) -> int:
        """The address standing for GPU ``gpu`` (or its MIG device ``mig``), stable for the process."""
        return self._base + gpu * _SLOTS + mig + 1

    def decode(self, handle: int | None) -> tuple[int, int]:
        """(gpu, mig) of a handle of ours; (-1, -1) for a foreign one."""
        offset = -1 if handle is None else handle - self._base
        if not 0 <= offset < MAX_GPUS * _SLOTS:
            return -1, -1
        return offset // _SLOTS, offset % _SLOTS - 1


S = TypeVar("S")


class PerLibrary(Generic[S]):
    """State a simulator module keeps per :class:`Library` (the GPM samples, the sample rings), made by
    ``make`` at first use and dropped with the library."""

    def __init__(self, make: Callable[[], S]) -> None:
        self._states: weakref.WeakKeyDictionary[Library, S] = weakref.WeakKeyDictionary()
        self._make = make

    def __call__(self, lib: Library) -> S:
        found = self._states.get(lib)
        if found is None:
            found = self._states[lib] = self._make()
        return found
