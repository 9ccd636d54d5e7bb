"""NVLink port (PRM) counters: ``nvmlDeviceReadPRMCounters_v1`` (Blackwell and later), one call per GPU
for every link asked, each link's counter its own entry with its own status.

DCGM reads DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT (1509) of a link entity the same way: counter
201 (PPCNT group 0x20, the InfiniBand PortCounters' port_xmit_wait) with localPort = the link index.
port_xmit_wait counts ticks in which the port had data to send but sent none (a dimensionless count).
"""

from __future__ import annotations

from collections.abc import Sequence
from ctypes import POINTER, byref, cast
from typing import Any

import pynvml

from gpu_exporter.backends.nvml.readers import VALUE_MEMBERS

CALL = "nvmlDeviceReadPRMCounters_v1"
#: Selector of the catalogue's source → NVML's PRM counter id.
COUNTERS: dict[str, int] = {"transmit_wait": pynvml.NVML_PRM_COUNTER_ID_PPCNT_PORTCOUNTERS_PORT_XMIT_WAIT}

Outcome = float | Exception  # a raw count, or the NVMLError of its entry


def read_counters(handle: Any, asked: Sequence[tuple[int, str]]) -> dict[tuple[int, str], Outcome]:
    """One ``nvmlDeviceReadPRMCounters_v1`` for the (link, selector) pairs ``asked``: each pair's raw
    count, or the NVMLError of its entry's status. An error of the call itself propagates (every pair
    shares it)."""
    entries = (pynvml.c_nvmlPRMCounter_v1_t * len(asked))()  # zeroed: no Python __init__ per element
    for entry, (link, selector) in zip(entries, asked, strict=True):
        entry.counterId = COUNTERS[selector]
        entry.inputValue.localPort = link
    request = pynvml.c_nvmlPRMCounterList_v1_t(len(asked), cast(entries, POINTER(pynvml.c_nvmlPRMCounter_v1_t)))
    function = pynvml._nvmlGetFunctionPointer(CALL)  # raises NVMLError_FunctionNotFound before R570
    pynvml._nvmlCheckReturn(function(handle, byref(request)))
    result: dict[tuple[int, str], Outcome] = {}
    for entry, pair in zip(entries, asked, strict=True):
        value = entry.outputValue
        if value.status != pynvml.NVML_SUCCESS:
            result[pair] = pynvml.NVMLError(value.status)
        else:
            result[pair] = float(getattr(value.outputValue, VALUE_MEMBERS.get(value.outputType, "ullVal")))
    return result
