"""NVLink5 port counters (per GPU link) and the GPU's C2C link (Grace Hopper / Grace Blackwell chip-to-chip),
collector ``nvlink``: values NVML offers only as field values, read in the GPU's one
``nvmlDeviceGetFieldValues`` call (per-link ones with scopeId = the link).

The NVLink5 counters (NVML fields 201-221, 235-250) exist on Blackwell and newer; elsewhere each entry
answers NOT_SUPPORTED once and is not asked again. DCGM serves them as GPU fields (1200-1219, 1404-1419)
holding NVML's sum over the links (DCGM asks scopeId UINT_MAX on NVLink5): the compatibility profile
composes that sum from these per-link rows (:mod:`gpu_exporter.compat.fields`). The DCGM backend does not
read them per link (that needs DCGM link-entity watches), so they have no DCGM source.

The C2C fields (NVML 170-172, 231-234) are read with scopeId 0, as DCGM's cache manager asks for them
(DCGM fields 285-287, 1400-1403, INT64): the values of the GPU's first C2C link.
"""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import STATIC, DcgmSource, MetricSpec, NvmlSource, counter, gauge

_MB = Fraction(10**6)  # NVML's and DCGM's C2C bandwidth unit, MB/s
_FIELD = "nvmlDeviceGetFieldValues"

#: NVLink5 port counters: (row name, variant, NVML selector, DCGM field of the GPU-wide sum, help text).
NVLINK5_COUNTERS: tuple[tuple[str, tuple[tuple[str, str], ...], str, int, str], ...] = (
    ("gpu_nvlink_port_transmit_packets_total", (), "nvlink5_tx_packets", 1200,
     "Packets sent over this NVLink (NVLink5 port counter)"),
    ("gpu_nvlink_port_transmit_bytes_total", (), "nvlink5_tx_bytes", 1201,
     "Bytes sent over this NVLink (NVLink5 port counter)"),
    ("gpu_nvlink_port_receive_packets_total", (), "nvlink5_rx_packets", 1202,
     "Packets received over this NVLink (NVLink5 port counter)"),
    ("gpu_nvlink_port_receive_bytes_total", (), "nvlink5_rx_bytes", 1203,
     "Bytes received over this NVLink (NVLink5 port counter)"),
    *(
        ("gpu_nvlink_port_errors_total", (("type", kind),), f"nvlink5_{kind}_errors", number,
         "Errors on this NVLink by type (NVLink5 port counters; malformed_packet: malformed packets received; "
         "buffer_overrun: received packets discarded on a buffer overrun; receive: received packets with errors; "
         "receive_remote: received packets marked bad by the sender (stomp/EBP); receive_general: received "
         "packets with a header mismatch; local_link_integrity: times local errors passed their threshold; "
         "transmit_discard: packets discarded on transmit; symbol: received symbol errors; effective: errors "
         "summed over packets)")
        for kind, number in (
            ("malformed_packet", 1204), ("buffer_overrun", 1205), ("receive", 1206), ("receive_remote", 1207),
            ("receive_general", 1208), ("local_link_integrity", 1209), ("transmit_discard", 1210),
            ("symbol", 1214), ("effective", 1219),
        )
    ),
    *(
        ("gpu_nvlink_port_recoveries_total", (("result", result),), f"nvlink5_recovery_{result}", number,
         "Times this NVLink went from up to recovery, by result (succeeded: it came back up; failed: it was "
         "declared down)")
        for result, number in (("succeeded", 1211), ("failed", 1212))
    ),
    ("gpu_nvlink_port_recovery_events_total", (), "nvlink5_recovery_events", 1213,
     "Times this NVLink went from up to recovery, whatever the result"),
    *(
        ("gpu_nvlink_fec_history_total", (("bin", str(b)),), f"nvlink5_fec_history_{b}", 1404 + b,
         "NVLink forward error correction history: NVML's count of corrected symbol errors in bin N (FEC "
         "history bins 0-15 of this link)")
        for b in range(16)
    ),
)  # fmt: skip

_NVLINK5_ROWS: tuple[MetricSpec, ...] = tuple(
    counter(
        name,
        "bytes" if name.endswith("_bytes_total") else "",
        text,
        "nvlink",
        NvmlSource(_FIELD, selector),
        None,
        variant=variant,
        entities=("nvlink",),
    )
    for name, variant, selector, _number, text in NVLINK5_COUNTERS
)

_C2C_ROWS: tuple[MetricSpec, ...] = (
    gauge(
        "gpu_c2c_links", "", "C2C (chip-to-chip) links of the GPU to its Grace CPU", "nvlink",
        NvmlSource(_FIELD, "c2c_link_count"), DcgmSource(285), "DCGM_FI_DEV_C2C_LINK_COUNT", every=STATIC,
    ),
    gauge(
        "gpu_c2c_link_up", "", "1 while the GPU's first C2C link is active, 0 while it is inactive", "nvlink",
        NvmlSource(_FIELD, "c2c_link_status"), DcgmSource(286), "DCGM_FI_DEV_C2C_LINK_STATUS", maximum=1,
    ),
    gauge(
        "gpu_c2c_link_max_bandwidth_bytes_per_second", "bytes_per_second",
        "Speed of the GPU's first C2C link while active (NVML reports MB/s)", "nvlink",
        NvmlSource(_FIELD, "c2c_max_bandwidth", _MB), DcgmSource(287, _MB), "DCGM_FI_DEV_C2C_MAX_BANDWIDTH",
        1 / _MB, every=STATIC,
    ),
    *(
        counter(
            "gpu_c2c_link_errors_total", "",
            "Errors on the GPU's first C2C link by type (crc: CRC error interrupts; replay: replays; "
            "replay_back_to_back: back-to-back replays)", "nvlink",
            NvmlSource(_FIELD, f"c2c_{kind}_errors"), DcgmSource(number), name, variant=(("type", kind),),
        )
        for kind, number, name in (
            ("crc", 1400, "DCGM_FI_DEV_C2C_LINK_ERROR_INTR"),
            ("replay", 1401, "DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY"),
            ("replay_back_to_back", 1402, "DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B"),
        )
    ),
    gauge(
        "gpu_c2c_link_low_power", "", "1 while the GPU's first C2C link is in its low-power state, 0 at full power",
        "nvlink", NvmlSource(_FIELD, "c2c_power_state"), DcgmSource(1403), "DCGM_FI_DEV_C2C_LINK_POWER_STATE",
        maximum=1,
    ),
    counter(
        "gpu_nvlink_ecc_errors_total", "", "NVLink data ECC errors of the GPU, summed over its links", "nvlink",
        NvmlSource(_FIELD, "nvlink_ecc_data_errors"), DcgmSource(1220), "DCGM_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL",
    ),
)  # fmt: skip

#: NVLink5 bit error rates over the GPU's links together (NVML 222, 220 with scopeId UINT_MAX, as DCGM asks):
#: NVML's encoded mantissa and exponent decoded to a ratio of bits (DCGM's 1216 and 1218, doubles). DCGM's
#: 1215 and 1217 are the encoded number itself (compat_fields.ENCODED_FIELDS). The DCGM backend does not watch them.
_BER_ROWS: tuple[MetricSpec, ...] = tuple(
    gauge(
        f"gpu_nvlink_{kind}_bit_error_ratio", "ratio",
        f"Bit error rate of the GPU's NVLinks together, {what} (NVLink5: NVML's mantissa × 10^-exponent)",
        "nvlink", NvmlSource(_FIELD, f"nvlink_{kind}_ber", ber=True), None, name, maximum=1,
    )
    for kind, what, name in (
        ("symbol", "from symbol errors", "DCGM_FI_DEV_NVLINK_COUNT_SYMBOL_BER_FLOAT"),
        ("effective", "from effective errors", "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER_FLOAT"),
    )
)  # fmt: skip

ROWS: tuple[MetricSpec, ...] = (*_NVLINK5_ROWS, *_C2C_ROWS, *_BER_ROWS)
