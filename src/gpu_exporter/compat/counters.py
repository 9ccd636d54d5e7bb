"""dcgm-exporter's counters CSV: which DCGM fields to export, with their Prometheus type and help.

Format (as dcgm-exporter reads it): ``#`` starts a comment line; every other non-blank line is
exactly three comma-separated fields, spaces around them ignored: a DCGM field name in any of its
spellings (current, renamed, or dcgm-exporter 1.x's lowercase ``dcgm_sm_clock``; or one of
dcgm-exporter's ``DCGM_EXP_*`` pseudo-fields), a type (gauge, counter, histogram, summary,
label) and a help text. A ``label`` row exports no series: it adds the field's string value as a
label named after the field. A malformed line or unknown name raises :class:`CountersError`
naming the file, the line and the value.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.compat.field_names import close_names, field_id

TYPES = ("gauge", "counter", "histogram", "summary", "label")


class CountersError(ValueError):
    """A counters file cannot be used; the message names the file, line and value, and the fix."""


@dataclass(frozen=True)
class Counter:
    """One row: the DCGM field name, its Prometheus type as written, and its help text."""

    field: str
    type: str
    help: str
    line: int


# dcgm-exporter's shipped default counter list (etc/default-counters.csv, 4.8.2), as facts:
# the field, the type and the help text of each active row.
DEFAULT_COUNTERS_CSV = """\
# Format: DCGM field, Prometheus metric type, help message
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL, gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, Total number of NVLink bandwidth counters for all lanes.
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_PROF_DRAM_ACTIVE, gauge, Ratio of cycles the device memory interface is active sending or receiving data.
DCGM_FI_PROF_PCIE_TX_BYTES, gauge, The rate of data transmitted over the PCIe bus - including both protocol headers \
and data payloads - in bytes per second.
DCGM_FI_PROF_PCIE_RX_BYTES, gauge, The rate of data received over the PCIe bus - including both protocol headers \
and data payloads - in bytes per second.
"""


def parse(text: str, source: str) -> tuple[Counter, ...]:
    """Rows of a counters file; ``source`` names it in error messages."""
    counters = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = next(csv.reader(io.StringIO(stripped), skipinitialspace=True))
        if len(fields) != 3:
            raise CountersError(
                f"{source}:{number}: {stripped!r} has {len(fields)} fields; a row is 'DCGM field, type, help'"
            )
        field, kind, help_text = (part.strip() for part in fields)
        if field_id(field) is None:
            near = " or ".join(close_names(field))
            hint = f"did you mean {near}?" if near else "use a DCGM field name such as DCGM_FI_DEV_GPU_TEMP"
            raise CountersError(f"{source}:{number}: unknown field {field!r}; {hint}")
        if kind not in TYPES:
            raise CountersError(f"{source}:{number}: type {kind!r} of {field} is not one of {', '.join(TYPES)}")
        counters.append(Counter(field, kind, help_text, number))
    return tuple(counters)


def load(path: str) -> tuple[Counter, ...]:
    """Read and parse a counters file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise CountersError(f"{path}: cannot be read: {err.strerror}; give a readable counters CSV") from None
    return parse(text, path)


def defaults() -> tuple[Counter, ...]:
    """dcgm-exporter's default counter list."""
    return parse(DEFAULT_COUNTERS_CSV, "built-in default counters")
