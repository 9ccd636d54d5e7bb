"""The catalogue: one declarative table of every metric gpu-exporter exports.

Rows live in one module per group of collectors (:mod:`.devices`, :mod:`.health`, :mod:`.modes`, :mod:`.fabric`,
:mod:`.links`, :mod:`.profiling`); their shape is :mod:`.spec`, the shared vocabulary :mod:`.vocabulary`, and
the metrics without a vendor source (identity, events, self-metrics) :mod:`.fixed`, the Xid table :mod:`.xids`.
Backends, the pipeline, the exposition, the README's metric table and the tests all read this
table. No code outside it spells a metric name: code that needs one by name takes it from a row,
from :mod:`.fixed`'s named rows or from :mod:`.keys` (with :func:`key_of` for a row of a family of
several), and ``tests/unit/test_single_source.py`` fails on a literal name elsewhere (its exceptions are
named there, each with its reason). dcgm-exporter's names (``DCGM_FI_*``) are dcgm-exporter's facts:
a row records the one it maps to (``compat_name``), and the full field table is
:mod:`gpu_exporter.compat.field_names`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_exporter.catalogue import (
    allocations,
    devices,
    fabric,
    health,
    keys,
    links,
    modes,
    power_smoothing,
    processes,
    profiling,
)
from gpu_exporter.catalogue.fabric import NVSWITCH_IDENTITY_FIELDS, NVSWITCH_PORT_ERRORS
from gpu_exporter.catalogue.fixed import (
    EVENT_METRICS,
    FIXED,
    HEALTH_METRICS,
    IDENTITY_METRICS,
    PRECREATED_ERROR_KINDS,
    PRECREATED_INVALID,
    SELF_METRICS,
    SWITCH_FIXED_METRICS,
)
from gpu_exporter.catalogue.spec import (
    DETAILS,
    FULL,
    KIB,
    MIB,
    ONE,
    ROOT_OF,
    STATIC,
    Constant,
    DcgmSource,
    Derivation,
    Detail,
    EntityKind,
    FixedMetric,
    IdleWhileAllocated,
    IdleWhileHeld,
    Integral,
    Kind,
    MetricSpec,
    NvmlSource,
    Share,
    Source,
    key_of,
    scaled,
)
from gpu_exporter.catalogue.vocabulary import (
    CLOCK_EVENT_REASONS,
    DEVICE_LABELS,
    INFO_LABELS,
    LINK_LABEL,
    MIG_INFO_LABELS,
    MIG_LABELS,
    NVLINK_ERROR_FIELDS,
    UNIT_MAXIMA,
    UNIT_SUFFIXES,
    VIOLATION_POLICIES,
)
from gpu_exporter.catalogue.xids import PRECREATED_XIDS, XID_CODES, Xid

#: Rows about GPUs and what a GPU's worker reads with them (MIG instances, NVLinks), in table order.
METRICS: tuple[MetricSpec, ...] = (
    *devices.ROWS, *power_smoothing.ROWS, *health.ROWS, *modes.ROWS, *fabric.NVLINK_ROWS, *links.ROWS,
    *profiling.ROWS, *processes.ROWS, *allocations.ROWS,
)  # fmt: skip
#: Rows about NVSwitches and their ports (collector ``nvswitch``, DCGM only), read by the fabric worker.
SWITCH_METRICS: tuple[MetricSpec, ...] = fabric.SWITCH_ROWS
#: Every row, GPU rows first: the order families are rendered in.
ALL_METRICS: tuple[MetricSpec, ...] = (*METRICS, *SWITCH_METRICS)

BY_KEY: dict[str, MetricSpec] = {spec.key: spec for spec in ALL_METRICS}
#: Rows of each family, in table order (most families have one row).
FAMILIES: dict[str, tuple[MetricSpec, ...]] = {
    name: tuple(spec for spec in METRICS if spec.name == name) for name in dict.fromkeys(s.name for s in METRICS)
}
#: Families whose 0→1 transitions are remembered for windowed counts (dcgm-exporter's
#: DCGM_EXP_CLOCK_EVENTS_COUNT): each row's activations, by its variant value.
WINDOWED_FAMILIES: frozenset[str] = frozenset({"gpu_clock_event_active"})

#: Collector names: the catalogue's, in table order, then ``xid`` (events rather than polled values).
COLLECTORS: tuple[str, ...] = (*dict.fromkeys(spec.collector for spec in ALL_METRICS), "xid")
#: Rows whose value is the mean of the driver's samples since the previous read where the backend hands
#: them over (NVML's sample buffers), rather than the newest sample: a gauge that says what the interval
#: was. dcgm-exporter's names keep the vendor's own value (the compatibility renders the raw value).
SAMPLE_MEANS: frozenset[str] = frozenset({keys.UTILIZATION})
#: Collectors that are off unless enabled: expensive, or of hardware most hosts lack. Profiling is on: it
#: reads what the GPU offers (GPM on Hopper and later on NVML, DCGM's profiling module), backs off while
#: another profiler holds the counters, and ``--no-collector.profiling`` turns it off.
DEFAULT_OFF: frozenset[str] = frozenset({"nvlink", "nvswitch"})
DEFAULT_COLLECTORS: frozenset[str] = frozenset(COLLECTORS) - DEFAULT_OFF


def bound(spec: MetricSpec) -> float | None:
    """The largest plausible value of ``spec`` in base units (its own maximum, else its unit's)."""
    return spec.bound


def enabled_specs(collectors: frozenset[str]) -> tuple[MetricSpec, ...]:
    """Every row (GPU and NVSwitch) whose collector is enabled, in table order."""
    return tuple(spec for spec in ALL_METRICS if spec.collector in collectors)


def detailed(specs: Sequence[MetricSpec], detail: Detail) -> tuple[MetricSpec, ...]:
    """The rows of ``specs`` the exposition renders at ``detail``: all of them at ``full``, the lean
    ones otherwise."""
    return tuple(specs) if detail == FULL else tuple(spec for spec in specs if spec.detail != FULL)


def enabled_switch_specs(collectors: frozenset[str]) -> tuple[MetricSpec, ...]:
    """The NVSwitch rows whose collector is enabled, in table order."""
    return tuple(spec for spec in SWITCH_METRICS if spec.collector in collectors)


__all__ = [
    "ALL_METRICS", "BY_KEY", "CLOCK_EVENT_REASONS", "COLLECTORS", "DEFAULT_COLLECTORS", "DEFAULT_OFF", "DETAILS",
    "FULL", "DEVICE_LABELS", "EVENT_METRICS", "FAMILIES", "FIXED", "HEALTH_METRICS", "IDENTITY_METRICS",
    "INFO_LABELS", "KIB",
    "LINK_LABEL", "METRICS", "MIB", "MIG_INFO_LABELS", "MIG_LABELS", "NVLINK_ERROR_FIELDS", "NVSWITCH_IDENTITY_FIELDS",
    "NVSWITCH_PORT_ERRORS", "ONE", "PRECREATED_XIDS", "ROOT_OF", "SAMPLE_MEANS", "SELF_METRICS", "STATIC",
    "SWITCH_FIXED_METRICS",
    "SWITCH_METRICS", "PRECREATED_ERROR_KINDS", "PRECREATED_INVALID",
    "UNIT_MAXIMA", "UNIT_SUFFIXES", "VIOLATION_POLICIES", "WINDOWED_FAMILIES", "XID_CODES", "Constant",
    "DcgmSource", "Derivation", "Detail", "EntityKind", "FixedMetric", "IdleWhileAllocated", "IdleWhileHeld",
    "Integral", "Kind", "MetricSpec", "NvmlSource", "Share", "Source", "Xid", "bound", "detailed", "enabled_specs",
    "enabled_switch_specs", "key_of", "scaled",
]  # fmt: skip
