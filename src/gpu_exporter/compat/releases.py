"""dcgm-exporter's releases from 4.8.2 to 4.10 as profiles: what each serves differently, written once
as data, and how the profile is chosen (an explicit version, else the names in the counters file).

What differs between releases, for a drop-in (NVIDIA's release notes, "DCGM Exporter Release Notes"
and the GitHub release pages of 4.6.0-4.8.3, 4.8.4, 4.9.0 and 4.10.0):

- 4.8.2 (DCGM 4.5.3): the host label is ``Hostname``.
- 4.8.3 (DCGM 4.6.0) and 4.8.4 (DCGM 4.6.1): "Rename the Hostname label to hostname (#655)"; the
  exporter-owned cumulative totals (``DCGM_EXP_XID_ERRORS_TOTAL``) appear. The shipped default list is
  4.8.2's (4.8.4's additions, fabric health and power limits, are opt-in rows).
- 4.9 (DCGM 4.7.0): "Rename the 23 default and profiling-preset fields that DCGM 4.7 deprecates to their
  new DCGM 4.7 names. Eleven of them also change unit: clocks from MHz to hertz, energy from millijoules
  to joules, utilization from a percentage to a 0 to 1 ratio, GPU memory from MiB to bytes, and NVLink
  throughput from MB/s to bytes per second"; "Rename the driver-version label on every metric from
  DCGM_FI_DRIVER_VERSION to DCGM_FI_SYSTEM_DRIVER_VERSION"; "Collect DCGM_FI_DEV_FB_CAPACITY_BYTES
  (total GPU memory in bytes) by default".
- 4.10 (DCGM 4.8.0): "DCGM_FI_PROF_PCIE_TX_BYTES → DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND" (and RX,
  NVLink TX/RX), "All four still use bytes per second, and custom collectors can still use the old
  names"; PCIe TX and RX are collected by default.

The new names are DCGM's own (DCGM 4.6's bindings list the renames of its "Field Naming Standard" as
deprecated → current, e.g. DCGM_FI_DEV_GPU_TEMP → DCGM_FI_DEV_GPU_TEMP_CELSIUS; the hertz and joules
names are DCGM 4.x's fields 1603, 1604 and 1611). The notes do not list the 23 one by one: the table
below is those renames applied to 4.8's default and profiling-preset rows, and the names of the
memory, utilisation and NVLink base-unit fields that DCGM 4.7 added are the ones
:data:`.field_names.BASE_UNIT_NAMES` records. Old names keep working in a custom file, as NVIDIA's do:
a row is served under the name it is written with, in that field's unit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_exporter.compat.counters import DEFAULT_COUNTERS_CSV
from gpu_exporter.compat.field_names import BASE_UNIT_NAMES

#: dcgm-exporter 4.9's renames of its shipped rows: (4.8 name, 4.9 name, unit change or "", 4.9's help
#: text in our words). The unit changes are the release notes' eleven.
RENAMES_4_9: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", "MHz → Hz", "SM clock frequency (in Hz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "MHz → Hz", "Memory clock frequency (in Hz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", "", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "mJ → J",
     "Total energy consumption since boot (in J)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "% → 0-1", "GPU utilization (ratio 0 to 1)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEMORY_UTIL_RATIO", "% → 0-1", "Memory utilization (ratio 0 to 1)."),
    ("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_ENC_UTIL_RATIO", "% → 0-1", "Encoder utilization (ratio 0 to 1)."),
    ("DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_DEC_UTIL_RATIO", "% → 0-1", "Decoder utilization (ratio 0 to 1)."),
    ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", "MiB → bytes", "Framebuffer memory free (in bytes)."),
    ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", "MiB → bytes", "Framebuffer memory used (in bytes)."),
    ("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED_BYTES", "MiB → bytes",
     "Framebuffer memory reserved (in bytes)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "MB/s → bytes/s",
     "Total NVLink throughput of all links (in bytes per second)."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "",
     "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "",
     "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED", "", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "",
     "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "",
     "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO", "",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION", "", "Driver Version"),
)  # fmt: skip
#: dcgm-exporter 4.10's renames of four profiling fields (same unit, bytes per second).
RENAMES_4_10: tuple[tuple[str, str, str, str], ...] = tuple(
    (f"DCGM_FI_PROF_{what}_BYTES", f"DCGM_FI_PROF_{what}_BYTES_PER_SECOND", "", help_text)
    for what, help_text in (
        ("PCIE_TX", "The rate of data transmitted over the PCIe bus (headers and payload) in bytes per second."),
        ("PCIE_RX", "The rate of data received over the PCIe bus (headers and payload) in bytes per second."),
        ("NVLINK_TX", "The rate of data transmitted over NVLink (headers and payload) in bytes per second."),
        ("NVLINK_RX", "The rate of data received over NVLink (headers and payload) in bytes per second."),
    )
)
#: The row 4.9 adds to its default list.
FB_CAPACITY_ROW = "DCGM_FI_DEV_FB_CAPACITY_BYTES, gauge, Total GPU memory (in bytes)."


def _renamed(text: str, renames: tuple[tuple[str, str, str, str], ...]) -> str:
    """A counters list with each renamed row's name and help replaced (comments kept)."""
    table = {old: (new, help_text) for old, new, _unit, help_text in renames}
    lines = []
    for line in text.splitlines():
        name, comma, rest = line.partition(",")
        if comma and name.strip() in table:
            new, help_text = table[name.strip()]
            kind = rest.split(",")[0].strip()
            line = f"{new}, {kind}, {help_text}"
        lines.append(line)
    return "\n".join(lines) + "\n"


#: 4.8.3's shipped list: 4.8.2's active rows, DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL typed gauge (its
#: etc/default-counters.csv at 4.6.0-4.8.3 as public material quotes it, not read at NVIDIA; the cumulative
#: DCGM_EXP_*_TOTAL rows are commented examples there).
_DEFAULTS_4_8_3 = DEFAULT_COUNTERS_CSV.replace(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter,", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge,"
)
_DEFAULTS_4_9 = _renamed(_DEFAULTS_4_8_3, RENAMES_4_9) + FB_CAPACITY_ROW + "\n"
_DEFAULTS_4_10 = _renamed(_DEFAULTS_4_9, RENAMES_4_10)


@dataclass(frozen=True)
class Release:
    """One dcgm-exporter profile: the releases it covers, the DCGM it ships, the host label's name,
    the driver-version label field of its shipped list, its shipped default counters, and the names a
    counters file shows it was written for (a name no earlier release serves)."""

    name: str
    covers: tuple[str, ...]
    dcgm: str
    hostname_label: str
    driver_label: str
    defaults: str
    marks: frozenset[str]
    #: Names this release's DCGM gives another field than the newest does (name → DCGM field id).
    ids: Mapping[str, int] = field(default_factory=dict)
    #: Which GPUs decide whether a profiling field is collected at all: ``first`` (up to 4.9: the metric
    #: groups of GPU 0, ``GetSupportedMetricGroups(0)`` in 4.8.2's pkg/cmd/app.go) or ``common`` (4.10: "Start
    #: on mixed-model nodes by collecting profiling fields common to all selected GPUs", its release notes).
    profiling_gpus: str = "first"


#: Before DCGM 4.7 (dcgm-exporter 4.8.x), DCGM_FI_DEV_GPU_UTIL_RATIO is DCGM 4.6's spelling of field 203,
#: the percent (DCGM 4.6's bindings: DCGM_FI_DEV_GPU_UTIL_RATIO = 203); 4.9 serves it as a 0-1 ratio.
_IDS_4_8 = {"DCGM_FI_DEV_GPU_UTIL_RATIO": 203}
_MARKS_4_9 = frozenset({new for _old, new, _unit, _help in RENAMES_4_9} | set(BASE_UNIT_NAMES))
#: Oldest first; the first is the profile when nothing says otherwise (the names of 4.8.2 and before
#: are what nearly every dashboard in the wild queries).
RELEASES: tuple[Release, ...] = (
    Release("4.8.2", ("4.8.2",), "4.5.3", "Hostname", "DCGM_FI_DRIVER_VERSION", DEFAULT_COUNTERS_CSV, frozenset(),
            _IDS_4_8),
    Release("4.8.3", ("4.8.3", "4.8.4"), "4.6.0, 4.6.1", "hostname", "DCGM_FI_DRIVER_VERSION", _DEFAULTS_4_8_3,
            frozenset({"DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_CLOCK_EVENTS_TOTAL"}), _IDS_4_8),
    Release("4.9", ("4.9.0",), "4.7.0", "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION", _DEFAULTS_4_9, _MARKS_4_9),
    Release("4.10", ("4.10.0",), "4.8.0", "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION", _DEFAULTS_4_10,
            frozenset(new for _old, new, _unit, _help in RENAMES_4_10), profiling_gpus="common"),
)  # fmt: skip
BY_NAME = {release.name: release for release in RELEASES}
#: An image reference as a version (its tag: DCGM release, dcgm-exporter release, variant).
IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.8.0-4.10.0-distroless"
#: A version as written, or a release tag: [DCGM version-]exporter version[-image variant].
_VERSION = re.compile(r"v?(?:\d+\.\d+\.\d+-)?(\d+)\.(\d+)(?:\.(\d+))?(?:-[A-Za-z][\w.]*)?")


class ReleaseError(ValueError):
    """A dcgm-exporter version gpu-exporter has no profile for; the message says which it has."""


def by_version(text: str) -> Release:
    """The profile of a dcgm-exporter version as a user writes it: ``4.9``, ``4.10.0``, a release tag
    ``4.7.0-4.9.0`` (DCGM version first) or an image reference ``…/dcgm-exporter:4.8.0-4.10.0-ubuntu22.04``.
    Releases before 4.8.2 get 4.8.2's profile (the same names and labels); a later one than 4.10.x is an error."""
    found = _VERSION.fullmatch(text.strip().rsplit(":", 1)[-1] if "/" in text else text.strip())
    if found is None:
        raise ReleaseError(f"{text!r} is not a dcgm-exporter version; give one such as 4.10.0 ({_known()})")
    number = tuple(int(part or 0) for part in found.groups())
    if number > (4, 10, 99):
        raise ReleaseError(f"dcgm-exporter {text} is newer than the profiles gpu-exporter has ({_known()})")
    if number >= (4, 10, 0):
        return BY_NAME["4.10"]
    if number >= (4, 9, 0):
        return BY_NAME["4.9"]
    if number >= (4, 8, 3):
        return BY_NAME["4.8.3"]
    return BY_NAME["4.8.2"]


def _known() -> str:
    return "profiles: " + ", ".join(f"{release.name} ({'/'.join(release.covers)})" for release in RELEASES)


def from_names(names: list[str]) -> tuple[Release, str]:
    """The newest profile whose marks a counters file's names include, and why; the oldest profile
    when none does."""
    for release in reversed(RELEASES):
        marked = sorted(set(names) & release.marks)
        if marked:
            return release, f"the counters file names {marked[0]}, which dcgm-exporter serves from {release.name}"
    return RELEASES[0], "nothing in the counters file names a later release"
