"""NVLink port (PRM) counters, as the C fake answers them (tests/fakenvml/prm.c):
``nvmlDeviceReadPRMCounters_v1`` with counter 201 (PPCNT port_xmit_wait) of local port L reads
``nvlink.L.transmit_wait``; a GPU with that key on none of its links answers NOT_SUPPORTED for the
whole call, else every entry gets its own status."""

from __future__ import annotations

from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

ULL = 3  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
PORT_XMIT_WAIT = 201  # NVML_PRM_COUNTER_ID_PPCNT_PORTCOUNTERS_PORT_XMIT_WAIT
MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS


@device("nvmlDeviceReadPRMCounters_v1")
def read_prm_counters(c: Call, counter_list: Any) -> int:
    request = abi.target(counter_list)
    if request is None or (request.numCounters and not request.counters):
        return errors.INVALID_ARGUMENT
    if all(c.text(f"nvlink.{link}.transmit_wait") is None for link in range(MAX_LINKS)):
        return errors.NOT_SUPPORTED
    for i in range(request.numCounters):
        entry = request.counters[i]
        out = entry.outputValue
        out.outputType, out.outputValue.ullVal = ULL, 0
        port = entry.inputValue.localPort
        value = c.u64(f"nvlink.{port}.transmit_wait") if port < MAX_LINKS else None
        if entry.counterId != PORT_XMIT_WAIT:
            out.status = errors.NOT_SUPPORTED
        elif port >= MAX_LINKS:
            out.status = errors.INVALID_ARGUMENT
        elif value is None:
            out.status = errors.NOT_SUPPORTED
        else:
            out.status, out.outputValue.ullVal = errors.SUCCESS, value
    return errors.SUCCESS
