"""The catalogue keys that code outside the catalogue reads a sample by (the status page, the
sanity filter, the dcgm-exporter compatibility's composed fields, the doctor).

A sample is keyed by its row's :attr:`~.spec.MetricSpec.key`: the family name, plus the variant
labels where a family has several rows (:func:`~.spec.key_of` builds one). The rows spell each name;
the constants here repeat the ones read elsewhere, so that nothing outside the catalogue spells a
metric name, and ``tests/unit/test_single_source.py`` checks that each is a row's key or family name.
"""

from __future__ import annotations

# utilization, memory, temperature, power (:mod:`.devices`)
UTILIZATION = "gpu_utilization_ratio"
MEMORY_COPY_UTILIZATION = "gpu_memory_copy_utilization_ratio"
ENCODER_UTILIZATION = "gpu_encoder_utilization_ratio"
DECODER_UTILIZATION = "gpu_decoder_utilization_ratio"
UTILIZATION_SECONDS = "gpu_utilization_seconds_total"
MEMORY_TOTAL = "gpu_memory_total_bytes"
MEMORY_USED = "gpu_memory_used_bytes"
MEMORY_FREE = "gpu_memory_free_bytes"
MEMORY_RESERVED = "gpu_memory_reserved_bytes"
BAR1_TOTAL = "gpu_bar1_memory_total_bytes"
BAR1_USED = "gpu_bar1_memory_used_bytes"
BAR1_FREE = "gpu_bar1_memory_free_bytes"
TEMPERATURE = "gpu_temperature_celsius"
TEMPERATURE_SLOWDOWN = "gpu_temperature_slowdown_threshold_celsius"
POWER = "gpu_power_watts"
POWER_LIMIT = "gpu_power_limit_watts"
ENERGY = "gpu_energy_joules_total"
FAN_SPEED = "gpu_fan_speed_ratio"
# clocks and PCIe (:mod:`.devices`)
SM_CLOCK = "gpu_sm_clock_hertz"
MEMORY_CLOCK = "gpu_memory_clock_hertz"
VIDEO_CLOCK = "gpu_video_clock_hertz"
SM_CLOCK_APPLICATION = "gpu_sm_clock_application_hertz"
MEMORY_CLOCK_APPLICATION = "gpu_memory_clock_application_hertz"
SM_CLOCK_MAX = "gpu_sm_clock_max_hertz"
MEMORY_CLOCK_MAX = "gpu_memory_clock_max_hertz"
VIDEO_CLOCK_MAX = "gpu_video_clock_max_hertz"
PCIE_GENERATION = "gpu_pcie_link_generation"
PCIE_GENERATION_MAX = "gpu_pcie_link_generation_max"
PCIE_WIDTH = "gpu_pcie_link_width"
PCIE_WIDTH_MAX = "gpu_pcie_link_width_max"
# health and clock events (:mod:`.health`); families of several rows, keyed with :func:`~.spec.key_of`
ECC_MODE = "gpu_ecc_mode_enabled"
ECC_ERRORS = "gpu_ecc_errors_total"
ROW_REMAP_PENDING = "gpu_row_remap_pending"
ROW_REMAP_FAILED = "gpu_row_remap_failed"
CLOCK_EVENT_ACTIVE = "gpu_clock_event_active"
RETIRED_PAGES_PENDING = "gpu_retired_pages_pending"
MEMORY_UNREPAIRABLE = "gpu_memory_unrepairable"
RECOVERY_ACTION = "gpu_recovery_action"
INFOROM_VALID = "gpu_inforom_valid"
FABRIC_STATE = "gpu_fabric_state"
FABRIC_HEALTH = "gpu_fabric_health"
PCIE_REPLAYS = "gpu_pcie_replay_errors_total"
CLOCK_THROTTLE = "gpu_clock_throttle_seconds_total"
# NVLink (:mod:`.fabric`, :mod:`.links`)
NVLINK_UP = "gpu_nvlink_up"
NVLINK_STATE = "gpu_nvlink_state"
NVLINK_ERRORS = "gpu_nvlink_errors_total"
NVLINK_TRANSMIT_BYTES = "gpu_nvlink_transmit_bytes_total"
NVLINK_RECEIVE_BYTES = "gpu_nvlink_receive_bytes_total"
NVLINK_LINK_TRANSMIT_RATE = "gpu_nvlink_link_transmit_bytes_per_second"
NVLINK_LINK_RECEIVE_RATE = "gpu_nvlink_link_receive_bytes_per_second"
NVLINK_PORT_TRANSMIT_WAIT = "gpu_nvlink_port_transmit_wait_total"
NVLINK_SYMBOL_BER = "gpu_nvlink_symbol_bit_error_ratio"
NVLINK_EFFECTIVE_BER = "gpu_nvlink_effective_bit_error_ratio"
# profiling (:mod:`.profiling`)
SM_ACTIVE = "gpu_sm_active_ratio"
SM_OCCUPANCY = "gpu_sm_occupancy_ratio"
TENSOR_ACTIVE = "gpu_tensor_pipe_active_ratio"
DRAM_ACTIVE = "gpu_dram_active_ratio"
# processes (:mod:`.processes`)
PROCESS_MEMORY_USED = "gpu_process_memory_used_bytes"
PROCESS_MEMORY_PEAK = "gpu_process_memory_peak_bytes"
PROCESS_SM_UTILIZATION = "gpu_process_sm_utilization_ratio"
PROCESSES = "gpu_processes"
