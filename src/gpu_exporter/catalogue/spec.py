"""The shape of a catalogue row: what a metric means, which entity it describes, and where each
backend reads it.

A :class:`MetricSpec` is data only. ``entities`` names the kinds of thing a row describes (a GPU,
its MIG instances, one NVLink, an NVSwitch, a switch port, later processes, pods and jobs);
``sources`` maps a backend's name to where that backend reads the raw value and the exact factor
into the base unit; ``derive`` marks a row the pipeline computes from other rows instead of
reading it. Everything else in the exporter reads these rows; code outside the catalogue that needs
a row by name takes its key from :mod:`.keys` (see :mod:`gpu_exporter.catalogue`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, Literal, Protocol

from gpu_exporter.catalogue.vocabulary import UNIT_MAXIMA, help_text

Kind = Literal["gauge", "counter"]
#: How much a row's exposition says: ``lean`` rows are rendered by default, ``full`` rows only with
#: ``--metrics.detail=full`` (their values are read either way: the status page and snapshot show them).
Detail = Literal["lean", "full"]
#: The detail levels, the default first.
DETAILS: tuple[Detail, ...] = ("lean", "full")
#: The kinds of thing a sample can describe. A GPU root owns its MIG instances and NVLinks; the
#: fabric root owns the NVSwitches and their ports. Processes, pods and jobs hang off a GPU too.
EntityKind = Literal["gpu", "mig", "nvlink", "nvswitch", "nvswitch_port", "process", "pod", "job"]
#: Which root's worker reads an entity kind (a GPU's worker reads the GPU and everything under it).
ROOT_OF: dict[str, Literal["gpu", "fabric"]] = {
    "gpu": "gpu",
    "mig": "gpu",
    "nvlink": "gpu",
    "process": "gpu",
    "pod": "gpu",
    "job": "gpu",
    "nvswitch": "fabric",
    "nvswitch_port": "fabric",
}

# Scale factors are exact fractions so that 612345 mW becomes 612.345 W, not 612.3450000000001.
ONE = Fraction(1)
KIB = Fraction(1024)
MIB = Fraction(1024 * 1024)


def scaled(raw: float, scale: Fraction) -> float:
    """``raw × scale`` rounded once (multiply by the numerator, then divide by the denominator), so
    integer vendor values convert to the nearest float: 312450 mW → 312.45 W exactly."""
    return raw * scale.numerator / scale.denominator


class Source(Protocol):
    """Where one backend reads a row, and how its raw value becomes the base-unit value."""

    @property
    def scale(self) -> Fraction: ...

    def value(self, raw: float) -> float:
        """The base-unit value of ``raw`` (the vendor's number as the backend read it)."""
        ...


@dataclass(frozen=True)
class NvmlSource:
    """Where the NVML backend reads a value.

    ``call`` is the pynvml function (the C symbol it resolves may carry a ``_vN`` suffix);
    ``selector`` picks one value of a call that returns several (a struct field or an argument
    such as the clock type), empty for calls that return one number. ``scale`` multiplies the raw
    NVML value into the metric's base unit. ``ber``: the raw value is NVML's encoded NVLink bit error
    rate (bits 0-7 the exponent E, bits 8-11 the mantissa M), and the value is M × 10^-E.
    """

    call: str
    selector: str = ""
    scale: Fraction = ONE
    ber: bool = False

    def value(self, raw: float) -> float:
        if self.ber:
            return ber_value(int(raw))
        return scaled(raw, self.scale)


def ber_value(encoded: int) -> float:
    """NVML's encoded NVLink bit error rate as a ratio: mantissa (bits 8-11) × 10^-exponent (bits 0-7),
    as nvml.h's NVML_NVLINK_ERROR_COUNTER_BER_GET splits it and DCGM decodes it. Divided, so that the
    result is the nearest double (3 × 10^-9 is 3e-09; DCGM's M × pow(10, -E) can be one unit off)."""
    return ((encoded >> 8) & 0xF) / 10.0 ** (encoded & 0xFF)


@dataclass(frozen=True)
class DcgmSource:
    """Where the DCGM backend reads a value: a numeric field id (names change between DCGM
    releases, numbers do not) and the factor from DCGM's unit to the base unit. A non-zero ``bit``
    reads one flag of a bitmask field as 0 or 1. A per-link row names one field per link instead
    (``links[n]`` is link n's field; ``field_id`` is link 0's). A ``call`` row is not a field at
    all: the value comes from that DCGM call (``field_id`` is 0)."""

    field_id: int
    scale: Fraction = ONE
    bit: int = 0
    links: tuple[int, ...] = ()
    call: str = ""

    @property
    def fields(self) -> tuple[int, ...]:
        """Every field id this source reads (none for a ``call`` source)."""
        if self.call:
            return ()
        return self.links or (self.field_id,)

    def value(self, raw: float) -> float:
        if self.bit:
            return 1.0 if int(raw) & self.bit else 0.0
        return scaled(raw, self.scale)


@dataclass(frozen=True)
class Integral:
    """A counter that integrates the gauge ``of`` (a catalogue key) over the time between samples:
    busy seconds from a utilization ratio. Where the backend hands over the driver's own samples of
    ``of`` (NVML's sample buffer), every driver sample is integrated instead of the reads."""

    of: str

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.of,)

    def describe(self) -> str:
        return f"integrated from {self.of} at every sample"


@dataclass(frozen=True)
class IdleWhileHeld:
    """A counter of the time ``utilization`` stayed below ``below`` (at or above it, when ``above``)
    while ``holders`` (a count of processes) was at least one; absent where ``holders`` cannot be read.
    Where the backend hands over the driver's own samples of ``utilization`` (NVML's sample buffer),
    each sample counts for the time since the previous one; otherwise each read for the time since
    the previous read."""

    utilization: str
    holders: str
    below: float
    above: bool = False

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.utilization, self.holders)

    def describe(self) -> str:
        return f"integrated from {self.utilization} and {self.holders} at every sample"


@dataclass(frozen=True)
class Constant:
    """A row whose value is fixed while its entity exists (an ``*_info`` row of an attribution)."""

    value: float

    @property
    def inputs(self) -> tuple[str, ...]:
        return ()

    def describe(self) -> str:
        return f"{self.value:g} while the allocation exists"


@dataclass(frozen=True)
class IdleWhileAllocated:
    """A counter, on an allocation (pod or job), of the time its GPU ran no compute process
    (``holders`` below one) or stayed below ``below`` utilization: reserved but wasted. Reads the
    values of the allocation's GPU."""

    utilization: str
    holders: str
    below: float

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.utilization, self.holders)

    def describe(self) -> str:
        return f"integrated from the allocated GPU's {self.utilization} and {self.holders} at every sample"


@dataclass(frozen=True)
class Share:
    """A row of the GPU's ledger (:mod:`gpu_exporter.sampling.ledger`): on an allocation, its part of
    the GPU's time (``allocated``), busy time (``busy``), energy (``energy``), SM time of its
    processes (``sm``), the memory its processes hold (``memory``, a gauge) or the largest memory one of
    its processes has held since it started (``memory_peak``, a gauge); on a GPU, the busy
    time (``unattributed_busy``) or energy (``unattributed_energy``) no allocation accounts for."""

    part: Literal[
        "allocated", "busy", "energy", "sm", "memory", "memory_peak", "unattributed_busy", "unattributed_energy"
    ]

    @property
    def inputs(self) -> tuple[str, ...]:
        return ()

    def describe(self) -> str:
        return _SHARE_SOURCES[self.part]


_SHARE_SOURCES = {
    "allocated": "the time between two reads of the GPU, split evenly among its allocations",
    "busy": "the growth of gpu_utilization_seconds_total between two reads, split by the processes' "
    "SM activity (nvmlDeviceGetProcessUtilization)",
    "energy": "the growth of gpu_energy_joules_total between two reads, split by busy time and allocated time",
    "sm": "gpu_process_sm_utilization_ratio of the allocation's processes, integrated between reads",
    "memory": "the sum of gpu_process_memory_used_bytes of the allocation's processes",
    "memory_peak": "the largest gpu_process_memory_peak_bytes of the allocation's processes (NVML accounting "
    "statistics, nvmlDeviceGetAccountingStats maxMemoryUsage)",
    "unattributed_busy": "the growth of gpu_utilization_seconds_total that no allocation's part takes",
    "unattributed_energy": "the growth of gpu_energy_joules_total that no allocation's part takes",
}


Derivation = Integral | IdleWhileHeld | Constant | IdleWhileAllocated | Share


def key_of(name: str, variant: tuple[tuple[str, str], ...] = ()) -> str:
    """The key of family ``name``'s row with these variant labels: ``name{label=value,...}``, or the
    name alone for a family of one row (as samples are keyed)."""
    if not variant:
        return name
    return name + "{" + ",".join(f"{label}={value}" for label, value in variant) + "}"


@dataclass(frozen=True, eq=False)
class MetricSpec:  # derived attributes are cached (rows are immutable and read on every sample)
    """One exported metric about an entity.

    ``unit`` is the base unit, also the name's suffix. ``collector`` is the ``--collector.NAME``
    that enables it. ``entities`` are the kinds it describes, in render order (a GPU row NVML also
    reports per MIG device lists ``("gpu", "mig")``). ``every`` reads an expensive call only every so
    many seconds (at least once a cycle; the last value is kept in between). ``derive`` says how the
    pipeline computes a row that has no vendor source. ``compat_name`` and ``compat_scale`` render the same sample under
    dcgm-exporter's name and unit. ``variant`` gives the extra labels of one series of a family
    that several rows share (e.g. ``reason``). ``maximum`` is the physical bound in base units
    above which a value is dropped as invalid; ``minimum`` the one below which it is (0: no metric
    is negative but a few, such as a temperature margin past the limit). ``detail`` is ``full`` for a
    row the default (lean) exposition leaves out: a value no shipped alert, recording rule or dashboard
    computes with (near-static settings, values derivable from others, rarely-set reasons).
    """

    name: str
    kind: Kind
    unit: str
    description: str
    collector: str
    sources: Mapping[str, NvmlSource | DcgmSource] = field(default_factory=dict)
    entities: tuple[EntityKind, ...] = ("gpu",)
    compat_name: str | None = None
    compat_scale: Fraction = ONE
    every: int = 1
    derive: Derivation | None = None
    variant: tuple[tuple[str, str], ...] = ()
    maximum: float | None = None
    minimum: float = 0.0
    detail: Detail = "lean"

    @cached_property
    def key(self) -> str:
        """Unique key of this row: the name, plus the variant labels when the family has several rows."""
        return key_of(self.name, self.variant)

    @cached_property
    def help(self) -> str:
        """HELP text: the meaning, the unit and the source on each backend (shared by a family's rows)."""
        return help_text(self)

    @cached_property
    def bound(self) -> float | None:
        """The largest plausible value in base units (the row's own maximum, else its unit's)."""
        return self.maximum if self.maximum is not None else UNIT_MAXIMA.get(self.unit)

    @cached_property
    def root(self) -> Literal["gpu", "fabric"]:
        """Which worker reads this row: a GPU's, or the fabric's (NVSwitches)."""
        return ROOT_OF[self.entities[0]]

    def source(self, backend: str) -> NvmlSource | DcgmSource | None:
        """Where ``backend`` reads this row; None when it cannot (or the row is derived)."""
        return self.sources.get(backend)

    @cached_property
    def nvml(self) -> NvmlSource | None:
        source = self.sources.get("nvml")
        return source if isinstance(source, NvmlSource) else None

    @cached_property
    def dcgm(self) -> DcgmSource | None:
        source = self.sources.get("dcgm")
        return source if isinstance(source, DcgmSource) else None

    @cached_property
    def mig(self) -> bool:
        """Also read per MIG instance."""
        return "mig" in self.entities

    @cached_property
    def per_link(self) -> bool:
        """About one NVLink (of a GPU, or a port of an NVSwitch)."""
        return self.entities[0] in ("nvlink", "nvswitch_port")

    @cached_property
    def nvswitch(self) -> bool:
        """About an NVSwitch or one of its ports rather than a GPU."""
        return self.root == "fabric"


@dataclass(frozen=True)
class FixedMetric:
    """A metric with no vendor source: identity, per-GPU state and the exporter's self-metrics."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str


def row(
    name: str,
    kind: Kind,
    unit: str,
    description: str,
    collector: str,
    nvml: NvmlSource | None,
    dcgm: DcgmSource | None,
    compat: str | None = None,
    compat_scale: Fraction = ONE,
    *,
    entities: tuple[EntityKind, ...] = ("gpu",),
    every: int = 1,
    derive: Derivation | None = None,
    variant: tuple[tuple[str, str], ...] = (),
    maximum: float | None = None,
    minimum: float = 0.0,
    detail: Detail = "lean",
) -> MetricSpec:
    """A row with its NVML and DCGM sources given in that order (None where a backend has none)."""
    sources: dict[str, NvmlSource | DcgmSource] = {}
    if nvml is not None:
        sources["nvml"] = nvml
    if dcgm is not None:
        sources["dcgm"] = dcgm
    return MetricSpec(
        name, kind, unit, description, collector, sources, entities, compat, compat_scale, every, derive, variant,
        maximum, minimum, detail,
    )  # fmt: skip


#: Rows a GPU reports for the whole card and, where NVML or DCGM does, per MIG instance.
GPU_AND_MIG: tuple[EntityKind, ...] = ("gpu", "mig")
#: ``detail`` of a row only ``--metrics.detail=full`` renders.
FULL: Detail = "full"
#: Cadence of near-static values (limits, thresholds, maximum clocks and link widths, ECC mode), which
#: change only with an admin action or a driver reload: read about once a minute (seconds).
STATIC = 60


def gauge(name: str, unit: str, *args: Any, **kwargs: Any) -> MetricSpec:
    """A gauge row: :func:`row`'s arguments without the kind."""
    return row(name, "gauge", unit, *args, **kwargs)


def counter(name: str, unit: str, *args: Any, **kwargs: Any) -> MetricSpec:
    """A counter row: :func:`row`'s arguments without the kind."""
    return row(name, "counter", unit, *args, **kwargs)
