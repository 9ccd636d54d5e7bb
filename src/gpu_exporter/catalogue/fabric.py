"""NVLink rows (collector nvlink: per GPU link) and NVSwitch rows (collector nvswitch: per switch and port)."""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import (
    KIB,
    DcgmSource,
    MetricSpec,
    NvmlSource,
    row,
)
from gpu_exporter.catalogue.vocabulary import NVLINK_ERROR_FIELDS

_MILLI = Fraction(1, 1000)

NVLINK_ROWS: tuple[MetricSpec, ...] = (
    # NVLink, one series per link (collector off by default: up to 18 links per GPU). DCGM has per-link
    # error counters but only a rate for per-link traffic (whole MB/s), so the byte counters are NVML's only.
    row(
        "gpu_nvlink_up", "gauge", "", "1 while this NVLink is active, 0 while it is down or disabled", "nvlink",
        NvmlSource("nvmlDeviceGetNvLinkState"), DcgmSource(0, call="dcgmGetNvLinkLinkStatus"), maximum=1,
        entities=("nvlink",),
    ),
    row(
        "gpu_nvlink_state", "gauge", "",
        "NVML's state of this NVLink (NVML field 165, NVML_FI_DEV_NVLINK_GET_STATE): 0 inactive, 1 active, "
        "2 sleep, 3 active but not usable for traffic", "nvlink",
        NvmlSource("nvmlDeviceGetFieldValues", "nvlink_state"), None, maximum=3, entities=("nvlink",),
    ),
    row(  # NVML only, as 1508: the DCGM backend watches GPU fields, and 1509 is a link entity's
        "gpu_nvlink_port_transmit_wait_total", "counter", "",
        "Ticks in which this NVLink port had data to send but sent none (PPCNT port_xmit_wait, NVML PRM "
        "counter 201; Blackwell and later): congestion backpressure", "nvlink",
        NvmlSource("nvmlDeviceReadPRMCounters_v1", "transmit_wait"), None, entities=("nvlink",),
        every=10,  # a call of its own: a cumulative count loses nothing read every 10 s, only freshness
    ),
    row(
        "gpu_nvlink_transmit_bytes_total", "counter", "bytes", "Data sent over this NVLink since the driver loaded",
        "nvlink", NvmlSource("nvmlDeviceGetFieldValues", "nvlink_tx", KIB), None, entities=("nvlink",),
    ),
    row(
        "gpu_nvlink_receive_bytes_total", "counter", "bytes", "Data received over this NVLink since the driver loaded",
        "nvlink", NvmlSource("nvmlDeviceGetFieldValues", "nvlink_rx", KIB), None, entities=("nvlink",),
    ),
    *(
        row(
            "gpu_nvlink_errors_total", "counter", "",
            "NVLink data-link errors on this link since the driver loaded, by type (crc_data: corrupted flits; "
            "replay: retransmissions; recovery: link retraining; crc_flit: flits with a bad header CRC)", "nvlink",
            NvmlSource("nvmlDeviceGetNvLinkErrorCounter", kind), DcgmSource(fields[0], links=fields),
            variant=(("type", kind),), entities=("nvlink",),
        )
        for kind, fields in NVLINK_ERROR_FIELDS
    ),
)  # fmt: skip


#: NVSwitch port error counter type → DCGM field (per port entity; DCGM reads them from the switch driver).
#: Fields 782/783 (port fatal and non-fatal errors) are not here: DCGM stores error records (a code and a
#: time per error) in them, not counts.
NVSWITCH_PORT_ERRORS: tuple[tuple[str, int], ...] = (
    ("replay", 784),
    ("recovery", 785),
    ("flit", 786),
    ("crc", 787),
    ("ecc", 788),
)

#: NVSwitch metrics (collector ``nvswitch``, DCGM only: NVML cannot see the switches). Series carry the
#: ``nvswitch`` label (DCGM's switch id, see gpu_nvswitch_info), port series also ``nvlink`` (the port).
#: Switch traffic counters are left out: DCGM documents no unit for them and reads 0 on H100 systems.
#: Every row is read every cycle (``every`` stays 1): they arrive in the same DCGM fetch as the GPUs'.
SWITCH_ROWS: tuple[MetricSpec, ...] = (
    row(
        "gpu_nvswitch_temperature_celsius", "gauge", "celsius", "NVSwitch die temperature", "nvswitch",
        None, DcgmSource(858), entities=("nvswitch",),
    ),
    row(
        "gpu_nvswitch_temperature_slowdown_threshold_celsius", "gauge", "celsius",
        "NVSwitch temperature at which the switch slows its links down", "nvswitch",
        None, DcgmSource(859), entities=("nvswitch",),
    ),
    row(
        "gpu_nvswitch_temperature_shutdown_threshold_celsius", "gauge", "celsius",
        "NVSwitch temperature at which the switch shuts down", "nvswitch",
        None, DcgmSource(860), entities=("nvswitch",),
    ),
    *(
        row(
            "gpu_nvswitch_power_watts", "gauge", "watts", "NVSwitch power draw by supply rail", "nvswitch",
            None, DcgmSource(field_id), variant=(("rail", rail),), entities=("nvswitch",),
        )
        for rail, field_id in (("vdd", 705), ("dvdd", 706), ("hvdd", 707))
    ),
    row(
        "gpu_nvswitch_voltage_volts", "gauge", "volts", "NVSwitch core supply voltage", "nvswitch",
        None, DcgmSource(701, _MILLI), entities=("nvswitch",),
    ),
    row(
        "gpu_nvswitch_reset_required", "gauge", "", "1 when the NVSwitch needs a reset (after a fatal error)",
        "nvswitch", None, DcgmSource(864), maximum=1, entities=("nvswitch",),
    ),
    *(
        row(
            "gpu_nvswitch_last_sxid", "gauge", "",
            "Number of the latest SXid (NVSwitch error) DCGM holds for this switch, by severity; absent when it "
            "holds none. DCGM keeps the value until its switch module re-attaches, so a series present means an "
            "SXid was recorded, not that a new one just happened", "nvswitch",
            None, DcgmSource(field_id), variant=(("severity", severity),), entities=("nvswitch",),
        )
        for severity, field_id in (("fatal", 856), ("non_fatal", 857))
    ),
    row(
        "gpu_nvswitch_nvlink_up", "gauge", "", "1 while this NVSwitch port's NVLink is active, 0 while it is down "
        "or disabled", "nvswitch", None, DcgmSource(0, call="dcgmGetNvLinkLinkStatus"), maximum=1,
        entities=("nvswitch_port",),
    ),
    *(
        row(
            "gpu_nvswitch_nvlink_errors_total", "counter", "",
            "Errors on this NVSwitch port since the switch driver loaded, by type (replay: retransmissions, "
            "recovery: link retraining, flit, crc, ecc)", "nvswitch",
            None, DcgmSource(field_id), variant=(("type", kind),), entities=("nvswitch_port",),
        )
        for kind, field_id in NVSWITCH_PORT_ERRORS
    ),
)  # fmt: skip
#: DCGM fields of each NVSwitch's identity (gpu_nvswitch_info): physical id, PCI domain/bus/device/function.
#: (Field 878, "NVSwitch UUID", is a port field on NSCQ-managed switches: the UUID of the device at the far end.)
NVSWITCH_IDENTITY_FIELDS: tuple[int, ...] = (863, 866, 867, 868, 869)
