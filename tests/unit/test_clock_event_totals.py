"""dcgm-exporter 4.8.3's DCGM_EXP_CLOCK_EVENTS_TOTAL (gpu_exporter.compat.clock_totals): clock events per
reason since start, edge-counted, fed frame by frame with overlapping sample windows."""

from __future__ import annotations

from gpu_exporter.compat.clock_totals import ClockEventTotals
from gpu_exporter.compat.counters import parse
from gpu_exporter.compat.releases import BY_NAME

POWER, THERMAL = frozenset({"power_cap"}), frozenset({"sw_thermal"})
BOTH = POWER | THERMAL


def test_a_reason_counts_once_each_time_it_becomes_active() -> None:
    totals = ClockEventTotals()
    assert totals.counts("GPU-a") is None  # no sample yet: no series
    totals.update("GPU-a", [(1.0, frozenset()), (2.0, POWER), (3.0, POWER), (4.0, BOTH)])
    assert totals.counts("GPU-a") == {"power_cap": 1, "sw_thermal": 1}
    # the next frame's window still holds the old samples: only newer ones count
    totals.update("GPU-a", [(3.0, POWER), (4.0, BOTH), (5.0, frozenset()), (6.0, POWER)])
    assert totals.counts("GPU-a") == {"power_cap": 2, "sw_thermal": 1}
    totals.update("GPU-a", [(5.0, frozenset()), (6.0, POWER)])  # the same frame again: nothing new
    assert totals.counts("GPU-a") == {"power_cap": 2, "sw_thermal": 1}


def test_a_reason_active_at_the_first_sample_is_one_event_and_gpus_are_apart() -> None:
    totals = ClockEventTotals()
    totals.update("GPU-a", [(10.0, THERMAL)])
    totals.update("GPU-b", [(10.0, frozenset())])
    assert totals.counts("GPU-a") == {"sw_thermal": 1}
    assert totals.counts("GPU-b") == {}  # sampled, never active: a zero series without clock_event


def test_4_8_3_types_the_nvlink_bandwidth_row_gauge() -> None:
    kinds = {row.field: row.type for row in parse(BY_NAME["4.8.3"].defaults, "4.8.3")}
    assert kinds["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "gauge"
    old = {row.field: row.type for row in parse(BY_NAME["4.8.2"].defaults, "4.8.2")}
    assert old["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"
