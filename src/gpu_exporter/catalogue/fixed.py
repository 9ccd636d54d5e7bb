"""Metrics with no vendor source (identity, per-GPU state, events, the exporter's self-metrics); the
Xid table they count by is :mod:`.xids`."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import FixedMetric
from gpu_exporter.catalogue.vocabulary import DEVICE_LABELS, INFO_LABELS, MIG_INFO_LABELS

IDENTITY_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_info",
        "gauge",
        "",
        INFO_LABELS,
        "Identity of each GPU; value is always 1. Source: NVML device and system queries.",
    ),
    FixedMetric("gpu_up", "gauge", "", DEVICE_LABELS, "1 while the GPU answers, 0 after the driver reported it lost."),
    FixedMetric(
        "gpu_mig_info",
        "gauge",
        "",
        MIG_INFO_LABELS,
        "Identity of each MIG device; value is always 1. Source: NVML MIG device handles.",
    ),
)
#: Metrics counted from driver events (collector ``xid``).
EVENT_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_xid_errors_total",
        "counter",
        "",
        (*DEVICE_LABELS, "xid"),
        "Xid errors reported by the driver since the exporter started, by Xid code (the Xid table's alerting "
        "subset starts at 0). Source: NVML nvmlEventSetWait (nvmlEventTypeXidCriticalError); DCGM field 230.",
    ),
    FixedMetric(
        "gpu_xid_last_timestamp_seconds",
        "gauge",
        "seconds",
        DEVICE_LABELS,
        "Unix time of the last Xid error on this GPU since the exporter started.",
    ),
    FixedMetric(
        "gpu_ecc_error_events_total",
        "counter",
        "",
        (*DEVICE_LABELS, "type"),
        "ECC error events delivered by the driver since the exporter started (single_bit, double_bit). "
        "Source: NVML nvmlEventSetWait.",
    ),
)
SELF_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_exporter_build_info", "gauge", "", ("version", "python_version"), "gpu-exporter build; value is always 1."
    ),
    FixedMetric(
        "gpu_exporter_backend_info",
        "gauge",
        "",
        ("backend", "reason"),
        "Backend in use and why it was chosen (or why it is down); value is always 1.",
    ),
    FixedMetric("gpu_exporter_backend_up", "gauge", "", (), "1 while the backend is initialised and answering."),
    FixedMetric(
        "gpu_exporter_collect_interval_seconds", "gauge", "seconds", (), "Configured time between sampling cycles."
    ),
    FixedMetric(
        "gpu_exporter_sample_duration_seconds",
        "gauge",
        "seconds",
        (),
        "Wall time of the last sampling cycle, all GPUs.",
    ),
    FixedMetric(
        "gpu_exporter_last_sample_timestamp_seconds",
        "gauge",
        "seconds",
        (),
        "Unix time of the last cycle in which at least one GPU was sampled.",
    ),
    FixedMetric(
        "gpu_exporter_sample_errors_total",
        "counter",
        "",
        ("kind",),
        "Failed vendor calls by error kind since start (the value is left out; unsupported is not an error).",
    ),
    FixedMetric(
        "gpu_exporter_invalid_values_total",
        "counter",
        "",
        ("field",),
        "Values dropped as physically implausible (driver sentinels, beyond physical bounds, used above total), "
        "by metric.",
    ),
    FixedMetric(
        "gpu_exporter_device_read_duration_seconds",
        "gauge",
        "seconds",
        DEVICE_LABELS,
        "Wall time of the last completed read of each GPU.",
    ),
    FixedMetric(
        "gpu_exporter_device_stalled",
        "gauge",
        "",
        DEVICE_LABELS,
        "1 while a GPU's read has not returned within one interval (a hung driver call).",
    ),
    FixedMetric(
        "gpu_exporter_device_down",
        "gauge",
        "",
        (*DEVICE_LABELS, "reason"),
        "1 while a GPU is down (gpu_up 0), with why: lost (the driver or DCGM says so), vanished (out of the "
        "driver's list), not_enumerated, unsupported (DCGM does not support it), detached, inaccessible or disabled "
        "(DCGM's status of it), refused (DCGM will not group it), connection_lost (DCGM).",
    ),
    FixedMetric(
        "gpu_exporter_fields_not_served",
        "gauge",
        "",
        ("reason",),
        "Vendor fields the exporter would read but the backend cannot be asked for, by reason (e.g. unknown to "
        "the connected DCGM release); their series are absent.",
    ),
    FixedMetric(
        "gpu_exporter_source_up",
        "gauge",
        "",
        ("source",),
        "1 while an attribution source answers (kubelet: its last pod-resources request succeeded).",
    ),
    FixedMetric(
        "gpu_exporter_source_requests_total",
        "counter",
        "",
        ("source",),
        "Requests made to an attribution source (the kubelet is asked once per refresh, never per scrape).",
    ),
    FixedMetric(
        "gpu_exporter_source_failures_total",
        "counter",
        "",
        ("source", "kind"),
        "Failed requests to an attribution source by kind (socket_missing, unavailable, timeout, too_large, "
        "malformed, error); the last good answer is kept for a bounded time meanwhile.",
    ),
    FixedMetric(
        "gpu_exporter_source_last_success_timestamp_seconds",
        "gauge",
        "seconds",
        ("source",),
        "Unix time of an attribution source's last good answer.",
    ),
    FixedMetric(
        "gpu_exporter_collector_success",
        "gauge",
        "",
        ("collector",),
        "1 when every read the collector needed in the last cycle succeeded (an unsupported value is not a "
        "failure), 0 when a vendor call failed or a read hung; xid: 1 while driver events can be received.",
    ),
    FixedMetric(
        "gpu_exporter_collector_duration_seconds",
        "gauge",
        "seconds",
        ("collector",),
        "Time the collector's vendor calls took in the last cycle, summed over devices (on DCGM, each device's "
        "one fetch is shared among the collectors by the number of fields each asked for).",
    ),
)
#: NVSwitch identity (collector ``nvswitch``, DCGM only).
SWITCH_FIXED_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_nvswitch_info",
        "gauge",
        "",
        ("nvswitch", "pci_bus_id", "physical_id"),
        "Identity of each NVSwitch (DCGM's switch id, PCI bus id, physical id); value is always 1. Source: DCGM "
        "fields 866-869, 863.",
    ),
)
FIXED: dict[str, FixedMetric] = {
    metric.name: metric for metric in (*IDENTITY_METRICS, *EVENT_METRICS, *SWITCH_FIXED_METRICS, *SELF_METRICS)
}

#: gpu_exporter_sample_errors_total{kind} series present (at 0) from the start.
PRECREATED_ERROR_KINDS = ("exception", "timeout", "unknown")
#: gpu_exporter_invalid_values_total{field} series present (at 0) from the start, where enabled: the
#: values whose driver sentinels and impossible readings the sanity filter drops.
PRECREATED_INVALID = (
    "gpu_temperature_celsius", "gpu_memory_temperature_celsius", "gpu_utilization_ratio",
    "gpu_memory_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts",
)  # fmt: skip
