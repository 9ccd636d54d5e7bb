"""Field ids of the NVLink5 port counters and of the GPU's C2C link: values NVML offers only through
``nvmlDeviceGetFieldValues`` (no call of their own), read in the GPU's one field-value call."""

from __future__ import annotations

import pynvml

#: The GPU's C2C link, asked with scopeId 0 as DCGM does (its first link), and the NVLink data ECC
#: total: a link count, 0/1 status, MB/s, error counts, 0 full / 1 low power; ECC errors summed over links.
C2C_FIELD_IDS: dict[str, int] = {
    "c2c_link_count": pynvml.NVML_FI_DEV_C2C_LINK_COUNT,
    "c2c_link_status": pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS,
    "c2c_max_bandwidth": pynvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW,
    "c2c_crc_errors": pynvml.NVML_FI_DEV_C2C_LINK_ERROR_INTR,
    "c2c_replay_errors": pynvml.NVML_FI_DEV_C2C_LINK_ERROR_REPLAY,
    "c2c_replay_back_to_back_errors": pynvml.NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B,
    "c2c_power_state": pynvml.NVML_FI_DEV_C2C_LINK_POWER_STATE,
    "nvlink_ecc_data_errors": pynvml.NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL,
}

#: NVLink5 bit error rates of the GPU's links together, asked with scopeId UINT_MAX (all links) as DCGM
#: does (its fields 1215-1218): NVML's encoding, bits 0-7 the exponent E and bits 8-11 the mantissa M of
#: the rate M × 10^-E (nvml.h, NVML_NVLINK_ERROR_COUNTER_BER_GET).
BER_FIELD_IDS: dict[str, int] = {
    "nvlink_symbol_ber": pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER,
    "nvlink_effective_ber": pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER,
}
ALL_LINKS = 0xFFFFFFFF  # scopeId UINT_MAX: NVML's value over every link of the GPU

#: NVLink5 port counters (Blackwell and newer), per link with scopeId = link: counts and bytes since
#: the driver loaded (NVML fields 201-204, 206-215, 219, 221 and the FEC history bins 235-250).
NVLINK5_FIELD_IDS: dict[str, int] = {
    "nvlink5_tx_packets": pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_PACKETS,
    "nvlink5_tx_bytes": pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES,
    "nvlink5_rx_packets": pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_PACKETS,
    "nvlink5_rx_bytes": pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES,
    "nvlink5_malformed_packet_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS,
    "nvlink5_buffer_overrun_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS,
    "nvlink5_receive_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS,
    "nvlink5_receive_remote_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS,
    "nvlink5_receive_general_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS,
    "nvlink5_local_link_integrity_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS,
    "nvlink5_transmit_discard_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS,
    "nvlink5_recovery_succeeded": pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
    "nvlink5_recovery_failed": pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS,
    "nvlink5_recovery_events": pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS,
    "nvlink5_symbol_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS,
    "nvlink5_effective_errors": pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS,
    **{f"nvlink5_fec_history_{b}": pynvml.NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0 + b for b in range(16)},
}
