"""The unit-tier tests of tests/process/test_compat.py (split by what they start)."""

from __future__ import annotations

import re

import pytest

from gpu_exporter.cli import parse_settings
from gpu_exporter.compat.counters import defaults, load
from gpu_exporter.config import OPTIONS
from tests.harness import (
    REPO,
)
from tests.process.test_compat import DCGM_EXPORTER_4X_FLAGS, FIXTURE, build_parser_options


def test_fixture_csv_loads_unchanged() -> None:
    rows = load(str(FIXTURE))
    assert [row.field for row in rows][:3] == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
    ]
    assert {row.type for row in rows} == {"gauge", "counter", "label"}
    assert "DCGM_FI_DEV_DEC_UTIL" in {row.field for row in rows}  # "NAME ," with a space before the comma
    assert [row.field for row in defaults()] == [row.field for row in rows if not row.field.startswith("DCGM_EXP_")]


def test_dcgm_exporter_flags_and_environment() -> None:
    settings = parse_settings(["-a", ":9500", "-c", "30000", "-f", str(FIXTURE)], {})
    assert (settings.port, settings.collect_interval) == (9500, 30.0)  # a bare -c number is milliseconds
    assert settings.metric_names == "dcgm-exporter" and settings.collectors_file == str(FIXTURE)
    assert parse_settings(["-c", "500ms"], {}).collect_interval == 0.5
    assert parse_settings(["-c", "2s"], {}).collect_interval == 2.0
    env = {"DCGM_EXPORTER_LISTEN": "127.0.0.1:9600", "DCGM_EXPORTER_INTERVAL": "1500",
           "DCGM_EXPORTER_COLLECTORS": str(FIXTURE), "DCGM_EXPORTER_KUBERNETES": "true"}  # fmt: skip
    settings = parse_settings([], env)
    assert (settings.host, settings.port, settings.collect_interval) == ("127.0.0.1", 9600, 1.5)
    assert settings.metric_names == "dcgm-exporter" and settings.kubernetes
    # ours win over dcgm-exporter's; --metric-names native keeps native names with a CSV
    assert parse_settings([], {**env, "GPU_EXPORTER_WEB_LISTEN_ADDRESS": ":9700"}).port == 9700
    assert parse_settings(["--metric-names", "native", "-f", str(FIXTURE)], {}).metric_names == "native"
    assert parse_settings(["-k"], {}).kubernetes


def test_dcgm_exporter_4x_help_is_covered() -> None:
    """Every spelling and variable of dcgm-exporter 4.x's --help is one of ours (a FLAGS row or an alias)."""
    from gpu_exporter.compat.flags import FLAGS

    options = build_parser_options()
    variables = {name for option in OPTIONS for name in option.envs} | {flag.env for flag in FLAGS}
    for spellings, env in DCGM_EXPORTER_4X_FLAGS:
        for spelling in spellings.split():
            assert spelling in options, spelling
        assert env in variables, env


def test_every_dcgm_exporter_flag_and_variable_is_accepted() -> None:
    from gpu_exporter.compat.flags import ALIASES, FLAGS

    for flag in FLAGS:
        value = "true" if flag.switch else (flag.default or "f" if flag.parse.__name__ == "parse_devices" else "")
        sample = {
            "--devices": "g+i", "--xid-count-window-size": "1000", "--clock-events-count-window-size": "1000",
            "--configmap-data": "ns:name", "--kubernetes-gpu-id-type": "uid", "--dump-retention": "24",
        }.get(flag.names[0], value or "x")  # fmt: skip
        for name in flag.names:
            parse_settings([name, sample], {})
        parse_settings([], {flag.env: sample})
    for spellings, env, ours in ALIASES:
        for spelling in spellings.split(" / "):
            assert spelling in build_parser_options(), spelling
        assert env in {name for option in OPTIONS if ours == option.flag for name in option.envs}, env
    settings = parse_settings(["-r", "tcp://10.0.0.5:5555", "--debug", "--collect-dcp"], {})
    assert (settings.dcgm_address, settings.log_level) == ("10.0.0.5:5555", "debug")
    assert "profiling" in settings.collectors
    assert parse_settings(["--debug", "--log.level", "error"], {}).log_level == "error"  # ours win
    assert parse_settings([], {"DCGM_REMOTE_HOSTENGINE_INFO": "h:5555"}).dcgm_address == "h:5555"
    assert parse_settings([], {"DCGM_EXPORTER_LOG_FORMAT": "json"}).log_format == "json"


def test_full_field_table() -> None:
    from gpu_exporter.compat.field_names import FIELD_IDS, OLD_NAMES, field_id

    assert len(set(FIELD_IDS.values())) >= 626 and len(OLD_NAMES) == 41
    assert field_id("DCGM_FI_DEV_FB_USED_PERCENT") == field_id("DCGM_FI_DEV_FB_USED_RATIO") == 254
    assert field_id("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") == field_id("DCGM_FI_DEV_CLOCKS_EVENT_REASONS") == 112
    assert field_id("dcgm_sm_clock") == 100 and field_id("dcgm_gpu_temp") == 150
    assert field_id("DCGM_FI_DEV_NOT_A_FIELD") is None


@pytest.mark.parametrize(
    ("code", "text"),
    [(0, "No Error"), (8, "GPU stopped processing"), (13, "Graphics Engine Exception"),
     (31, "GPU memory page fault"), (48, "Double Bit ECC Error"), (79, "GPU has fallen off the bus"),
     (94, "Contained ECC error"), (95, "Uncontained ECC error"), (172, "Uncorrectable SRAM Error"),
     (173, "Unknown Error"), (999, "Unknown Error")],
)  # fmt: skip
def test_xid_err_msg_texts_are_dcgm_exporters(code: int, text: str) -> None:
    from gpu_exporter.compat.xid import XID_TEXTS, xid_text

    assert xid_text(code) == text
    assert sorted(XID_TEXTS) == list(range(173))


def test_clock_events_count_counts_samples_in_the_window() -> None:
    """As dcgm-exporter: per reason, the reads within the window that had it active; only reasons
    seen; samples older than the window (or than the hour kept) drop out."""
    from gpu_exporter.catalogue import METRICS
    from gpu_exporter.compat.series import clock_event_counts
    from gpu_exporter.sampling.derive import Windows

    windows = Windows(METRICS)
    row = "gpu_clock_event_active{reason=%s}"
    off = {row % reason: 0.0 for reason in ("power_cap", "hw_thermal", "gpu_idle")}
    assert clock_event_counts(windows.snapshot().get("g", ()), 100.0, 60_000) is None  # no sample: zero series
    for second, active in enumerate([("power_cap",), ("power_cap",), (), ("power_cap", "hw_thermal"), ()]):
        windows.note("g", off | {row % reason: 1.0 for reason in active}, 1000.0 + second)
    windows.note("g", {"gpu_temperature_celsius": 40.0}, 1005.0)  # a read without the rows is no sample
    samples = windows.snapshot()["g"]
    assert len(samples) == 5
    assert clock_event_counts(samples, 1004.0, 60_000) == {"power_cap": 3, "hw_thermal": 1}  # sustained counts
    assert clock_event_counts(samples, 1004.0, 2_500) == {"power_cap": 1, "hw_thermal": 1}  # t >= 1001.5
    assert clock_event_counts(samples, 1100.0, 1_000) is None
    windows.note("g", off, 1004.0 + 3601)  # over an hour later the old samples are gone
    assert len(windows.snapshot()["g"]) == 1


def test_remote_hostengine_names_the_host_label() -> None:
    settings = parse_settings(["-r", "gpu-box-3:5555"], {"NODE_NAME": "here"})
    assert settings.dcgm_exporter.remote_host == "gpu-box-3"
    assert parse_settings(["-r", "gpu-box-3:5555", "-k"], {}).dcgm_exporter.remote_host == ""  # -k: the node
    from gpu_exporter.compat.plan import plan

    assert plan((), (), "nvml", True, "here", "Hostname", settings.dcgm_exporter).hostname == "gpu-box-3"


def test_migration_guide_names_and_factors_match_the_catalogue() -> None:
    from gpu_exporter.catalogue import METRICS

    guide = (REPO / "docs" / "dcgm-exporter-migration.md").read_text()
    rows = re.findall(r"^\| `(DCGM_\w+)` \| `(\w+)[^`]*` \| ([^|]+) \|$", guide, re.MULTILINE)
    assert len(rows) >= 20
    by_name = {spec.compat_name: spec for spec in METRICS if spec.compat_name}
    for compat, native, factor in rows:
        spec = by_name[compat]
        assert spec.name == native, compat
        scale = spec.compat_scale
        expected = "1" if scale == 1 else (f"× {scale.denominator}" if scale.numerator == 1 else f"÷ {scale.numerator}")
        assert factor.strip() == expected, compat
