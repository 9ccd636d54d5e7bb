"""Metrics with no vendor source (identity, per-GPU state, events, the exporter's self-metrics); the
Xid table they count by is :mod:`.xids`. Each is a named row (``GPU_INFO``, ``BUILD_INFO``, ...), which
the exposition builds its family from, so that the name is spelled here only."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import EntityKind, FixedMetric
from gpu_exporter.catalogue.vocabulary import DEVICE_LABELS, INFO_LABELS, MIG_INFO_LABELS

# Identity and per-GPU state.
GPU_INFO = FixedMetric(
    "gpu_info",
    "gauge",
    "",
    INFO_LABELS,
    "Identity of each GPU; value is always 1. Source: NVML device and system queries.",
)
GPU_UP = FixedMetric(
    "gpu_up", "gauge", "", DEVICE_LABELS, "1 while the GPU answers, 0 after the driver reported it lost."
)
MIG_INFO = FixedMetric(
    "gpu_mig_info",
    "gauge",
    "",
    MIG_INFO_LABELS,
    "Identity of each MIG device; value is always 1. Source: NVML MIG device handles.",
)
#: Identity and per-GPU state, rendered first.
IDENTITY_METRICS: tuple[FixedMetric, ...] = (GPU_INFO, GPU_UP, MIG_INFO)
# Counted from driver events (collector ``xid``).
XID_ERRORS = FixedMetric(
    "gpu_xid_errors_total",
    "counter",
    "",
    (*DEVICE_LABELS, "xid"),
    "Xid errors reported by the driver since the exporter started, by Xid code (a code's series appears with "
    "its first Xid; with --metrics.detail=full the Xid table's alerting subset starts at 0). Source: NVML "
    "nvmlEventSetWait (nvmlEventTypeXidCriticalError); DCGM field 230.",
)
XID_ERRORS_ALL_CODES = FixedMetric(
    "gpu_xid_errors_all_codes_total",
    "counter",
    "",
    DEVICE_LABELS,
    "Xid errors reported by the driver since the exporter started, every code together; present at 0 on every "
    "GPU, so the first Xid is an increase (the per-code gpu_xid_errors_total says which codes). Source: as "
    "gpu_xid_errors_total.",
)
XID_LAST_TIMESTAMP = FixedMetric(
    "gpu_xid_last_timestamp_seconds",
    "gauge",
    "seconds",
    DEVICE_LABELS,
    "Unix time of the last Xid error on this GPU since the exporter started.",
)
ECC_ERROR_EVENTS = FixedMetric(
    "gpu_ecc_error_events_total",
    "counter",
    "",
    (*DEVICE_LABELS, "type"),
    "ECC error events delivered by the driver since the exporter started (single_bit, double_bit). "
    "Source: NVML nvmlEventSetWait.",
)
#: Metrics counted from driver events (collector ``xid``).
EVENT_METRICS: tuple[FixedMetric, ...] = (XID_ERRORS_ALL_CODES, XID_ERRORS, XID_LAST_TIMESTAMP, ECC_ERROR_EVENTS)
# The health model (:mod:`gpu_exporter.sampling.health`): judged from the values above each cycle.
HEALTH_STATUS = FixedMetric(
    "gpu_health_status",
    "gauge",
    "",
    (*DEVICE_LABELS, "subsystem"),
    "Health of each GPU: 0 pass, 1 warn, 2 fail, over all subsystems (subsystem all) and, with "
    "--metrics.detail=full, per DCGM health-watch system (pcie, nvlink, pmu, mcu, mem, sm, inforom, thermal, "
    "power, driver) where something it is judged from was read (the Xids judge every subsystem while driver "
    "events are watched). Source: the health model over ECC, row "
    "remapping, unrepairable memory, the recovery action, fabric health, the inforom, slowdowns, PCIe replays, "
    "NVLink errors, Xids and lost GPUs.",
)
HEALTH_ACTION = FixedMetric(
    "gpu_health_action",
    "gauge",
    "",
    DEVICE_LABELS,
    "What the health model recommends for the GPU, the most drastic of its findings: 0 none, 1 restart the job, "
    "2 drain, 3 reset the GPU, 4 reboot the node, 5 service (replace or repair the board). The status page, "
    "/api/v1/status and gpu-exporter snapshot give the reason.",
)
#: The health model's families, after the values they are judged from.
HEALTH_METRICS: tuple[FixedMetric, ...] = (HEALTH_STATUS, HEALTH_ACTION)
# The exporter's self-metrics (``gpu_exporter_*``).
BUILD_INFO = FixedMetric(
    "gpu_exporter_build_info", "gauge", "", ("version", "python_version"), "gpu-exporter build; value is always 1."
)
BACKEND_INFO = FixedMetric(
    "gpu_exporter_backend_info",
    "gauge",
    "",
    ("backend", "reason", "until"),
    'Backend in use and why it was chosen (or why it is down: reason="paused" while a full pause asked of the '
    'exporter holds it closed, until="2026-12-07T05:40:00Z" when it ends on its own, only then); value is '
    "always 1.",
)
BACKEND_UP = FixedMetric(
    "gpu_exporter_backend_up", "gauge", "", (), "1 while the backend is initialised and answering."
)
PAUSED = FixedMetric(
    "gpu_exporter_paused",
    "gauge",
    "",
    ("scope",),
    "1 while a pause asked of the exporter (gpu-exporter pause) is in force, by scope: profiling "
    "(the profiling collector's vendor calls stopped, its series absent) or full (the GPU library released, "
    "every GPU series absent); 0 otherwise. Alert rules about missing GPUs hold off while it is 1.",
)
PAUSE_END = FixedMetric(
    "gpu_exporter_pause_end_timestamp_seconds",
    "gauge",
    "seconds",
    ("scope",),
    "Unix time the pause in force ends on its own (gpu-exporter resume ends it earlier); absent when none is.",
)
COLLECT_INTERVAL = FixedMetric(
    "gpu_exporter_collect_interval_seconds", "gauge", "seconds", (), "Configured time between sampling cycles."
)
SAMPLE_DURATION = FixedMetric(
    "gpu_exporter_sample_duration_seconds",
    "gauge",
    "seconds",
    (),
    "Wall time of the last sampling cycle, all GPUs.",
)
LAST_SAMPLE_TIMESTAMP = FixedMetric(
    "gpu_exporter_last_sample_timestamp_seconds",
    "gauge",
    "seconds",
    (),
    "Unix time of the last cycle in which at least one GPU was sampled.",
)
SAMPLE_ERRORS = FixedMetric(
    "gpu_exporter_sample_errors_total",
    "counter",
    "",
    ("kind",),
    "Failed vendor calls by error kind since start (the value is left out; unsupported is not an error).",
)
INVALID_VALUES = FixedMetric(
    "gpu_exporter_invalid_values_total",
    "counter",
    "",
    ("field",),
    "Values dropped as physically implausible (driver sentinels, beyond physical bounds, used above total), by metric.",
)
DEVICE_READ_DURATION = FixedMetric(
    "gpu_exporter_device_read_duration_seconds",
    "gauge",
    "seconds",
    DEVICE_LABELS,
    "Wall time of the last completed read of each GPU.",
)
DEVICE_STALLED = FixedMetric(
    "gpu_exporter_device_stalled",
    "gauge",
    "",
    DEVICE_LABELS,
    "1 while a GPU's read has not returned within one interval (a hung driver call).",
)
DEVICE_DOWN = FixedMetric(
    "gpu_exporter_device_down",
    "gauge",
    "",
    (*DEVICE_LABELS, "reason"),
    "1 while a GPU is down (gpu_up 0), with why: lost (the driver or DCGM says so), vanished (out of the "
    "driver's list), not_enumerated, unsupported (DCGM does not support it), detached, inaccessible or disabled "
    "(DCGM's status of it), refused (DCGM will not group it), connection_lost (DCGM).",
)
GPUS_PRESENT = FixedMetric(
    "gpu_exporter_gpus_present",
    "gauge",
    "",
    (),
    "GPUs the backend lists, up or down (a GPU that left the driver's list counts until it is forgotten).",
)
GPUS_EXPECTED = FixedMetric(
    "gpu_exporter_gpus_expected",
    "gauge",
    "",
    (),
    "GPUs this node should have (--expected-gpus); absent when not set. Fewer present than expected: GPUs "
    "missing since boot or forgotten by the driver.",
)
FIELDS_NOT_SERVED = FixedMetric(
    "gpu_exporter_fields_not_served",
    "gauge",
    "",
    ("reason",),
    "Vendor fields the exporter would read but the backend cannot be asked for, by reason (e.g. unknown to "
    "the connected DCGM release); their series are absent.",
)
SOURCE_UP = FixedMetric(
    "gpu_exporter_source_up",
    "gauge",
    "",
    ("source",),
    "1 while an attribution source answers (kubelet: its last pod-resources request succeeded).",
)
SOURCE_REQUESTS = FixedMetric(
    "gpu_exporter_source_requests_total",
    "counter",
    "",
    ("source",),
    "Requests made to an attribution source (the kubelet is asked once per refresh, never per scrape).",
)
SOURCE_FAILURES = FixedMetric(
    "gpu_exporter_source_failures_total",
    "counter",
    "",
    ("source", "kind"),
    "Failed requests to an attribution source by kind (socket_missing, unavailable, timeout, too_large, "
    "malformed, error); the last good answer is kept for a bounded time meanwhile.",
)
SOURCE_LAST_SUCCESS = FixedMetric(
    "gpu_exporter_source_last_success_timestamp_seconds",
    "gauge",
    "seconds",
    ("source",),
    "Unix time of an attribution source's last good answer.",
)
COLLECTOR_SUCCESS = FixedMetric(
    "gpu_exporter_collector_success",
    "gauge",
    "",
    ("collector",),
    "1 when every read the collector needed in the last cycle succeeded (an unsupported value is not a "
    "failure), 0 when a vendor call failed or a read hung; xid: 1 while driver events can be received.",
)
COLLECTOR_DURATION = FixedMetric(
    "gpu_exporter_collector_duration_seconds",
    "gauge",
    "seconds",
    ("collector",),
    "Time the collector's vendor calls took in the last cycle, summed over devices (on DCGM, each device's "
    "one fetch is shared among the collectors by the number of fields each asked for).",
)
#: The exporter's self-metrics, in render order.
SELF_METRICS: tuple[FixedMetric, ...] = (
    BUILD_INFO,
    BACKEND_INFO,
    BACKEND_UP,
    PAUSED,
    PAUSE_END,
    COLLECT_INTERVAL,
    SAMPLE_DURATION,
    LAST_SAMPLE_TIMESTAMP,
    SAMPLE_ERRORS,
    INVALID_VALUES,
    DEVICE_READ_DURATION,
    DEVICE_STALLED,
    DEVICE_DOWN,
    GPUS_PRESENT,
    GPUS_EXPECTED,
    FIELDS_NOT_SERVED,
    SOURCE_UP,
    SOURCE_REQUESTS,
    SOURCE_FAILURES,
    SOURCE_LAST_SUCCESS,
    COLLECTOR_SUCCESS,
    COLLECTOR_DURATION,
)
# NVSwitch identity (collector ``nvswitch``, DCGM only).
NVSWITCH_INFO = FixedMetric(
    "gpu_nvswitch_info",
    "gauge",
    "",
    ("nvswitch", "pci_bus_id", "physical_id"),
    "Identity of each NVSwitch (DCGM's switch id, PCI bus id, physical id); value is always 1. Source: DCGM "
    "fields 866-869, 863.",
)
#: NVSwitch identity (collector ``nvswitch``, DCGM only).
SWITCH_FIXED_METRICS: tuple[FixedMetric, ...] = (NVSWITCH_INFO,)
#: The ``*_info`` metric of each entity kind whose identity has one beside its series' labels.
INFO_OF: dict[EntityKind, FixedMetric] = {"mig": MIG_INFO, "nvswitch": NVSWITCH_INFO}
FIXED: dict[str, FixedMetric] = {
    metric.name: metric
    for metric in (*IDENTITY_METRICS, *EVENT_METRICS, *HEALTH_METRICS, *SWITCH_FIXED_METRICS, *SELF_METRICS)
}

#: gpu_exporter_sample_errors_total{kind} series present (at 0) from the start.
PRECREATED_ERROR_KINDS = ("exception", "timeout", "unknown")
#: gpu_exporter_invalid_values_total{field} series present (at 0) from the start, where enabled: the
#: values whose driver sentinels and impossible readings the sanity filter drops.
PRECREATED_INVALID = (
    "gpu_temperature_celsius", "gpu_memory_temperature_celsius", "gpu_utilization_ratio", "gpu_memory_used_bytes",
    "gpu_power_watts",
)  # fmt: skip
