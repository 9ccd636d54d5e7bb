"""The unrepairable-memory flag (DCGM 1507), read so that either struct layout a driver may use is safe.

``nvmlDeviceGetUnrepairableMemoryFlag_v1`` takes a struct that DCGM's header and nvidia-ml-py 13.615
declare as ``{version, bUnrepairableMemory}``, while nvml.h of nvidia-nvml-dev 13.5 declares it as
``{bUnrepairableMemory}`` alone. pynvml's wrapper reads the second word only, so a driver of the
one-word layout (which writes the flag over the version word) would read as 0: a lie. This reader
passes the two-word struct with the version preset and looks at which word the driver wrote.
"""

from __future__ import annotations

from ctypes import Structure, byref, c_uint
from typing import Any

import pynvml

#: The versioned struct id nvidia-ml-py presets (sizeof 8 | 1 << 24).
VERSION = int(getattr(pynvml, "nvmlUnrepairableMemory_v1", 0x1000008))
CALL = "nvmlDeviceGetUnrepairableMemoryFlag_v1"


class _Status(Structure):
    """Two words: the version on entry; the flag in the second word (or in the first, one-word layout)."""

    _fields_ = [("first", c_uint), ("second", c_uint)]


def decode(first: int, second: int) -> int | None:
    """The flag (0 or 1) from the struct's two words after the call; None where it cannot be trusted."""
    flag = second if first == VERSION else first
    return flag if flag in (0, 1) else None


def unrepairable_memory(handle: Any) -> dict[str, float | None]:
    """``nvmlDeviceGetUnrepairableMemoryFlag_v1``: 1 when the memory has an error row remapping cannot
    repair, 0 when not; absent when the driver wrote neither layout's 0/1. NVML errors propagate as
    pynvml's exceptions (NOT_SUPPORTED is remembered by the caller's memo)."""
    status = _Status(VERSION, 0)
    function = pynvml._nvmlGetFunctionPointer(CALL)  # raises NVMLError_FunctionNotFound on old drivers
    pynvml._nvmlCheckReturn(function(handle, byref(status)))
    return {"": decode(status.first, status.second)}
