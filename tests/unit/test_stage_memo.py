"""The unsupported memo in process, on an injected clock (no sleeping): a pair the vendor called
unsupported is not asked for ``retry_seconds``, then asked again; a rediscovery asks every pair again
at once; an answer forgets the pair; each change is logged once per GPU and report, re-asking is
silent."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter.sampling.memo import RETRY_SECONDS, UnsupportedMemo

GROUP = "GPU 0 (GPU-0000)"
POWER = "nvmlDeviceGetPowerUsage is not supported"


class _Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def _memo(retry: float = RETRY_SECONDS) -> tuple[UnsupportedMemo, _Clock]:
    clock = _Clock()
    return UnsupportedMemo(retry, clock), clock


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [record.getMessage() for record in caplog.records]  # only the memo logs in these tests
    caplog.clear()
    return lines


def test_an_empty_memo_asks_everything() -> None:
    memo, _ = _memo()
    assert memo.asks("GPU-0000", "gpu_power_watts") and not memo.remembers_any()


def test_an_unsupported_pair_is_left_alone_until_its_retry_interval_then_asked_again() -> None:
    memo, clock = _memo(60.0)
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    assert not memo.asks("GPU-0000", "gpu_power_watts")
    assert memo.asks("GPU-0000", "gpu_temperature_celsius")  # other rows of the GPU ...
    assert memo.asks("GPU-1111", "gpu_power_watts")  # ... and the same row of other GPUs are asked
    clock.now += 59.999
    assert not memo.asks("GPU-0000", "gpu_power_watts")
    clock.now += 0.001
    assert memo.asks("GPU-0000", "gpu_power_watts")
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)  # still unsupported: another full interval
    assert not memo.asks("GPU-0000", "gpu_power_watts")
    assert memo.remembers_any()


def _first_report(memo: UnsupportedMemo) -> None:
    """Two reports: a sampler's memo at short intervals holds a GPU's first report one cycle (what GPM learns
    at its second read joins it); these tests hold alike whether it does or not."""
    memo.report()
    memo.report()


@given(st.floats(min_value=0.001, max_value=3600), st.floats(min_value=0, max_value=7200))
def test_asked_again_exactly_when_the_retry_interval_has_passed(retry: float, later: float) -> None:
    memo, clock = _memo(retry)
    memo.unsupported("GPU-0000", "gpu_fan_speed_ratio", "fan")
    asked_at = clock.now
    clock.now += later
    assert memo.asks("GPU-0000", "gpu_fan_speed_ratio") == (clock.now >= asked_at + retry)


def test_a_rediscovery_asks_every_pair_again_at_once_without_logging_them_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    memo, _ = _memo()
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    _first_report(memo)
    assert len(_lines(caplog)) == 1
    memo.rediscovered()
    assert memo.asks("GPU-0000", "gpu_power_watts")
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)  # still not supported after the change
    assert not memo.asks("GPU-0000", "gpu_power_watts")
    memo.report()
    assert _lines(caplog) == []  # re-asking is silent


def test_an_answer_forgets_the_pair_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    memo, _ = _memo()
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    memo.answered("GPU-0000", "gpu_temperature_celsius", GROUP)  # never unsupported: nothing to say
    _first_report(memo)
    assert len(_lines(caplog)) == 1
    memo.answered("GPU-0000", "gpu_power_watts", GROUP)
    assert memo.asks("GPU-0000", "gpu_power_watts") and not memo.remembers_any()
    memo.answered("GPU-0000", "gpu_power_watts", GROUP)  # a second answer: already forgotten
    memo.report()
    assert _lines(caplog) == [f"{GROUP}: answers again: gpu_power_watts (was: {POWER})"]
    memo.report()
    assert _lines(caplog) == []


def test_one_short_line_per_gpu_and_report_the_families_and_series_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    memo, _ = _memo(60.0)
    for link in range(4):  # one family, per link: one name with its series count
        memo.unsupported(f"GPU-0000/nvlink{link}", "gpu_nvlink_errors_total{type=crc_flit}", "crc", GROUP)
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    memo.unsupported("GPU-0000", "gpu_fan_speed_ratio", "nvmlDeviceGetFanSpeed is not supported", GROUP)
    memo.unsupported("GPU-1111", "gpu_power_watts", POWER, "GPU 1 (GPU-1111)")
    _first_report(memo)
    records = [(record.levelno, record.getMessage()) for record in caplog.records]
    caplog.clear()
    info = [message for level, message in records if level == logging.INFO]
    assert info == [
        f"{GROUP}: 3 value(s) not supported here, absent from /metrics (not 0; named on the status page and at "
        "--log.level=debug)",
        "GPU 1 (GPU-1111): 1 value(s) not supported here, absent from /metrics (not 0; named on the status page and at "
        "--log.level=debug)",
    ]
    debug = [message for level, message in records if level == logging.DEBUG]
    assert debug[0] == (
        f"{GROUP}: not supported here: gpu_nvlink_errors_total (4 series), gpu_power_watts, gpu_fan_speed_ratio; "
        "asked again every 60s and when the devices change (the driver's answers: crc; nvmlDeviceGetFanSpeed is "
        f"not supported; {POWER})"
    )
    assert len(debug) == 2 and debug[1].startswith("GPU 1 (GPU-1111): not supported here: gpu_power_watts;")


def test_lacking_names_what_a_gpu_lacks_now_for_the_status_page() -> None:
    memo, _ = _memo()
    assert memo.lacking(GROUP) == ()
    for link in range(4):
        memo.unsupported(f"GPU-0000/nvlink{link}", "gpu_nvlink_errors_total{type=crc_flit}", "crc", GROUP)
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    memo.unsupported("GPU-1111", "gpu_fan_speed_ratio", "fan", "GPU 1 (GPU-1111)")
    assert memo.lacking(GROUP) == ("gpu_nvlink_errors_total (4 series)", "gpu_power_watts")
    memo.answered("GPU-0000", "gpu_power_watts", GROUP)
    memo.answered("GPU-0000/nvlink2", "gpu_nvlink_errors_total{type=crc_flit}", GROUP)
    assert memo.lacking(GROUP) == ("gpu_nvlink_errors_total (3 series)",)
    memo.rediscovered()  # asked again, still remembered until it answers
    assert memo.lacking("GPU 1 (GPU-1111)") == ("gpu_fan_speed_ratio",)


def test_an_entity_without_a_group_is_logged_under_its_own_uid(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    memo, _ = _memo()
    memo.unsupported("nvswitch3", "gpu_nvswitch_temperature_celsius", "field 858 not supported")
    _first_report(memo)
    assert _lines(caplog)[0].startswith("nvswitch3: 1 value(s) not supported here")


def test_unsupported_again_after_an_answer_is_a_new_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    memo, clock = _memo()
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    memo.answered("GPU-0000", "gpu_power_watts", GROUP)
    _first_report(memo)
    assert len(_lines(caplog)) == 2  # went, came back: both said
    clock.now += 1
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)
    memo.report()
    lines = _lines(caplog)
    assert len(lines) == 1 and lines[0].startswith(f"{GROUP}: 1 value(s) not supported here")


def test_a_gpus_first_report_waits_one_cycle_so_the_second_reads_findings_join_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """GPM computes between two samples: what a GPU's GPM lacks is known at its second read. Its first
    report is held one cycle, so a GPU says what it lacks in one line; later changes are reported at once."""
    caplog.set_level(logging.INFO)
    memo = UnsupportedMemo(RETRY_SECONDS, _Clock(), hold_first=True)  # the sampler's at intervals up to 10 s
    memo.unsupported("GPU-0000", "gpu_power_watts", POWER, GROUP)  # the first read
    memo.report()
    assert _lines(caplog) == []
    memo.unsupported("GPU-0000", "gpu_nvofa_engine_active_ratio{engine=0}", "nvmlGpmMetricsGet", GROUP)  # the second
    memo.report()
    assert [line.split(" value(s)")[0] for line in _lines(caplog)] == [f"{GROUP}: 2"]
    memo.unsupported("GPU-0000", "gpu_fan_speed_ratio", "fan", GROUP)
    memo.report()
    assert [line.split(" value(s)")[0] for line in _lines(caplog)] == [f"{GROUP}: 1"]
