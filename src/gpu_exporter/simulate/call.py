"""One call into the simulated library: the prologue every entry point runs first (as the test
fake's ``DEVICE_PROLOGUE`` / ``SYSTEM_PROLOGUE``), the fault keys, and per-device key look-ups.

Device calls check, in turn: initialised, handle valid, GPU present, ``gpuN.delay.F`` (sleeps
holding no lock), ``gpuN.lost_after``, ``gpuN.error.F``; host calls honour ``delay.F`` and
``error.F``. ``F`` is the symbol, or the symbol without its ``_vN`` suffix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.library import EXPORTS, Library
from gpu_exporter.simulate.scenario import Scenario

_VERSION = re.compile(r"_v\d+$")


@dataclass
class Call:
    """The state an entry point's body works with: scenario, time, GPU index and MIG index (-1)."""

    lib: Library
    s: Scenario
    t: float
    gpu: int
    mig: int = -1

    def text(self, key: str) -> str | None:
        """The raw value of ``gpuN.<key>``."""
        return self.s.get(f"gpu{self.gpu}.{key}")

    def u64(self, key: str) -> int | None:
        """``gpuN.<key>`` as a non-negative integer at this call's time (cycles applied)."""
        full = f"gpu{self.gpu}.{key}"
        return self.lib.uint_value(full, self.s.get(full), self.t)

    def f64(self, key: str) -> float | None:
        full = f"gpu{self.gpu}.{key}"
        return self.lib.float_value(full, self.s.get(full), self.t)

    def out(self, arg: Any, key: str) -> int:
        """Write ``gpuN.<key>`` into a scalar output; NOT_SUPPORTED when the key is absent."""
        if abi.target(arg) is None:
            return errors.INVALID_ARGUMENT
        value = self.u64(key)
        return errors.NOT_SUPPORTED if value is None else abi.put(arg, value)

    def out_pair(self, first: Any, first_key: str, second: Any, second_key: str) -> int:
        """Write two keys into two scalar outputs of one call; NOT_SUPPORTED unless both are present."""
        if abi.target(first) is None or abi.target(second) is None:
            return errors.INVALID_ARGUMENT
        one, other = self.u64(first_key), self.u64(second_key)
        if one is None or other is None:
            return errors.NOT_SUPPORTED
        abi.put(first, one)
        return abi.put(second, other)

    def flag(self, arg: Any, key: str) -> int:
        """Write ``gpuN.<key>`` as 0 or 1 (any non-zero value is 1) into a scalar output."""
        if abi.target(arg) is None:
            return errors.INVALID_ARGUMENT
        value = self.u64(key)
        return errors.NOT_SUPPORTED if value is None else abi.put(arg, 1 if value else 0)

    def _fault(self, kind: str, symbol: str) -> tuple[str, str] | None:
        scope = f"gpu{self.gpu}." if self.gpu >= 0 else ""
        key = f"{scope}{kind}.{symbol}"
        value = self.s.get(key)
        if value is None and _VERSION.search(symbol):
            key = f"{scope}{kind}.{_VERSION.sub('', symbol)}"
            value = self.s.get(key)
        return None if value is None else (key, value)

    def delay(self, symbol: str) -> None:
        """The ``delay.F`` fault: sleep, then catch up with the scenario and the clock."""
        found = self._fault("delay", symbol)
        seconds = self.lib.float_value(*found, self.t) if found else None
        if seconds is not None and seconds > 0:
            time.sleep(min(seconds, 1e9))
            self.s = self.lib.now()
            self.t = self.lib.elapsed()

    def forced(self, symbol: str) -> int:
        """The ``error.F`` fault: the forced return code, or SUCCESS."""
        found = self._fault("error", symbol)
        return self.lib.error_value(*found, self.t) if found else errors.SUCCESS

    def lost(self) -> bool:
        lost_after = self.f64("lost_after")
        return not self.lib.present(self.s, self.gpu, self.t) or (lost_after is not None and self.t >= lost_after)

    def entry_fault(self, symbol: str) -> int:
        """A field-value entry standing for device call ``symbol``: its delay, lost_after and error."""
        self.delay(symbol)
        return errors.GPU_IS_LOST if self.lost() else self.forced(symbol)


def prologue(lib: Library, symbol: str, gpu: int, mig: int, mig_ok: bool, by_index: bool) -> Call | int:
    """The device prologue: a :class:`Call`, or the error code to return."""
    lib.trace(symbol, gpu)
    if lib.refcount == 0:
        return errors.UNINITIALIZED
    c = Call(lib, lib.now(), lib.elapsed(), gpu, mig)
    if gpu < 0:
        return errors.INVALID_ARGUMENT
    if by_index and gpu >= lib.device_count(c.s, c.t):
        return errors.INVALID_ARGUMENT
    if not lib.present(c.s, gpu, c.t):
        return errors.GPU_IS_LOST
    keys = c.s.gpus.get(gpu)
    if mig >= 0 and (keys is None or mig not in keys.mig):
        return errors.INVALID_ARGUMENT  # that MIG device is gone from the scenario
    c.delay(symbol)
    if c.lost():
        return errors.GPU_IS_LOST
    code = c.forced(symbol)
    if code != errors.SUCCESS:
        return code
    if mig >= 0 and not mig_ok:
        return errors.NOT_SUPPORTED
    return c


def system_prologue(lib: Library, symbol: str) -> Call | int:
    """The host prologue (``gpu`` is -1 in the Call): trace, init, reload, ``delay.F``, ``error.F``."""
    lib.trace(symbol, -1)
    if lib.refcount == 0:
        return errors.UNINITIALIZED
    c = Call(lib, lib.now(), lib.elapsed(), -1)
    c.delay(symbol)
    code = c.forced(symbol)
    return c if code == errors.SUCCESS else code


Body = Callable[..., int]


def device(*symbols: str, mig_ok: bool = False) -> Callable[[Body], Body]:
    """Export ``body(call, *args after the handle)`` under ``symbols`` as a device-level call."""

    def register(body: Body) -> Body:
        def entry(lib: Library, symbol: str, handle: Any, *args: Any) -> int:
            gpu, mig = lib.decode(abi.address(handle))
            c = prologue(lib, symbol, gpu, mig, mig_ok, by_index=False)
            return c if isinstance(c, int) else body(c, *args)

        for symbol in symbols:
            EXPORTS[symbol] = entry
        return body

    return register


def system(*symbols: str) -> Callable[[Body], Body]:
    """Export ``body(call, *args)`` under ``symbols`` as a call about no single device."""

    def register(body: Body) -> Body:
        def entry(lib: Library, symbol: str, *args: Any) -> int:
            c = system_prologue(lib, symbol)
            return c if isinstance(c, int) else body(c, *args)

        for symbol in symbols:
            EXPORTS[symbol] = entry
        return body

    return register


def raw(*symbols: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Export ``body(library, symbol, *args)`` with no prologue (init, shutdown, error strings)."""

    def register(body: Callable[..., Any]) -> Callable[..., Any]:
        for symbol in symbols:
            EXPORTS[symbol] = body
        return body

    return register
