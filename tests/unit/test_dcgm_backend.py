"""The DCGM backend on the in-process fake adapter (tests/dcgmfake.py), driven through the real
Sampler; and ``--backend auto`` / ``--backend dcgm`` out of process on a host without DCGM."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from gpu_exporter.app import not_ready_reason
from gpu_exporter.assemble import bare_sampler
from gpu_exporter.assemble.backends import select
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.backends.dcgm import adapter as adapter_module
from gpu_exporter.backends.dcgm.adapter import DCGM3_BINDINGS, DCGM4_BINDINGS, DcgmAdapter
from gpu_exporter.backends.dcgm.backend import GROUP_PREFIX, PROFILING_RETRY_SECONDS
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_SWITCH,
    LINK_STATE_DISABLED,
    LINK_STATE_DOWN,
    LINK_STATE_UP,
    ST_BADPARAM,
    ST_GPU_IS_LOST,
    ST_GPU_NOT_SUPPORTED,
    ST_MODULE_NOT_LOADED,
    ST_NO_PERMISSION,
    ST_NOT_SUPPORTED,
    ST_NOT_WATCHED,
    ST_PROFILING_LIBRARY_ERROR,
    ST_PROFILING_NOT_SUPPORTED,
    ST_REQUIRES_ROOT,
)
from gpu_exporter.backends.nvml import NvmlBackend
from gpu_exporter.catalogue import (
    CLOCK_EVENT_REASONS,
    DEFAULT_COLLECTORS,
    METRICS,
    MetricSpec,
    enabled_specs,
    scaled,
)
from gpu_exporter.config import Settings
from tests.dcgmfake import (
    FP64_SENTINELS,
    INT32_SENTINELS,
    INT64_SENTINELS,
    STRING_SENTINELS,
    FakeDcgm,
    Raw,
    double,
    failed,
    int64,
    string,
)
from tests.harness import Labels, samples, value

ALL = frozenset(DEFAULT_COLLECTORS | {"profiling"})
PROFILING_FIELDS = frozenset({*range(1001, 1013), *range(1076, 1080)})  # a Grace Hopper: C2C too
PROFILING_NAMES = frozenset(spec.name for spec in METRICS if spec.collector == "profiling")
Parsed = dict[str, dict[Labels, float]]


class Clock:
    """A monotonic clock the test moves (backoff and profiling retries read it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def raw_for(spec: MetricSpec) -> Raw:
    """A plausible DCGM raw value for one catalogue row, in DCGM's unit."""
    assert spec.dcgm is not None
    if spec.dcgm.bit:
        return int64(0x44)  # hw_thermal (0x40) and power_cap (0x4)
    if spec.unit == "ratio":
        return double(0.25) if spec.dcgm.scale == 1 else int64(37)
    by_unit: dict[str, Raw] = {
        "bytes": int64(1024),
        "bytes_per_second": int64(2048) if spec.dcgm.scale != 1 else int64(3_500_000_000),
        "celsius": int64(55),
        "watts": double(250.5),
        "joules": int64(123_456_789),
        "hertz": int64(1410),
        "seconds": int64(2_500_000_000),
    }
    if spec.unit in by_unit:
        return by_unit[spec.unit]
    return int64(1) if spec.maximum is not None else int64(7)


def expected(spec: MetricSpec, raw: Raw) -> float:
    assert spec.dcgm is not None
    number = raw[1]
    assert isinstance(number, int | float)
    if spec.dcgm.bit:
        return 1.0 if int(number) & spec.dcgm.bit else 0.0
    return scaled(number, spec.dcgm.scale)


def full_fields(profiling: bool = True) -> dict[int, Raw]:
    fields = {spec.dcgm.field_id: raw_for(spec) for spec in METRICS if spec.dcgm is not None}
    if not profiling:
        fields = {f: r for f, r in fields.items() if f < 1001}
    return fields


def identity(index: int, name: str = "NVIDIA H100 80GB HBM3", mig: int = 0) -> dict[int, Raw]:
    return {
        50: string(name),
        52: int64(index),
        53: string(f"serial-{index}"),
        54: string(f"GPU-{index:08d}-0000-0000-0000-000000000000"),
        55: int64(index),
        57: string(f"00000000:{index + 0x18:02X}:00.0"),
        67: int64(mig),
        85: string("96.00.89.00.00"),
    }


def host(gpus: int = 2, mig_on_last: bool = True) -> FakeDcgm:
    """``gpus`` GPUs with every catalogue field; the last one in MIG mode with one 3g.40gb device."""
    fake = FakeDcgm()
    fake.globals = {1: string("550.54.15"), 2: string("12.550.54.15"), 5: int64(12040)}
    for gpu in range(gpus):
        mig = mig_on_last and gpu == gpus - 1
        fake.add_gpu(gpu, {**full_fields(), **identity(gpu, mig=int(mig))}, profiling=PROFILING_FIELDS)
    if mig_on_last:
        mig_fields = {spec.dcgm.field_id: raw_for(spec) for spec in METRICS if spec.dcgm is not None and spec.mig}
        fake.add_mig(gpus - 1, 7, 1, 11, 0, "3g.40gb", {**mig_fields, 54: string("MIG-aaaa")})
    return fake


class Run:
    """A Sampler on a DcgmBackend over ``fake``, stepped by hand."""

    def __init__(self, fake: FakeDcgm, collectors: frozenset[str] = ALL, interval: float = 3600.0) -> None:
        self.fake = fake
        self.clock = Clock()
        specs = enabled_specs(collectors)
        self.backend = DcgmBackend(lambda: fake, specs, interval, clock=self.clock)
        self.sampler = bare_sampler(
            self.backend, specs, interval, "test", watch_events="xid" in collectors, clock=self.clock,
        )  # fmt: skip
        self.interval = interval

    def cycle(self, advance: float = 0.0) -> Parsed:
        self.clock.now += advance
        snapshot = self.sampler.run_cycle()
        return samples(snapshot.rendered.text.decode())

    def not_ready(self) -> str:
        return not_ready_reason(self.sampler, self.interval, False)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.sampler.stop()


def exact(parsed: Parsed, metric: str, **labels: str) -> float | None:
    """The sample of ``metric`` with exactly these labels."""
    return parsed.get(metric, {}).get(frozenset(labels.items()))


def gpu_labels(gpu: int) -> dict[str, str]:
    return {"gpu": str(gpu), "uuid": f"GPU-{gpu:08d}-0000-0000-0000-000000000000"}


def test_every_catalogue_metric_for_gpus_and_mig_in_base_units(runs: list[Run]) -> None:
    run = Run(host())
    runs.append(run)
    parsed = run.cycle()
    # per-process rows are per process, not per GPU (tests/unit/test_dcgm_processes.py)
    rows = [
        spec for spec in METRICS if spec.dcgm is not None and spec.collector in ALL and "process" not in spec.entities
    ]
    assert {spec.collector for spec in rows} >= {"profiling", "memory", "ecc"}
    for gpu in (0, 1):
        for spec in rows:
            # MIG mode is the host's layout (GPU 1 is in MIG mode), not the generic raw value
            want = float(gpu == 1) if spec.name == "gpu_mig_mode_enabled" else expected(spec, raw_for(spec))
            got = exact(parsed, spec.name, **gpu_labels(gpu), **dict(spec.variant))
            assert got == want, f"{spec.key} gpu{gpu}: {got} != {want}"
    # per MIG device: the rows NVML also reports per MIG device, plus the per-instance profiling ratios
    mig = {**gpu_labels(1), "gpu_instance": "1", "compute_instance": "0", "profile": "3g.40gb"}
    for spec in rows:
        got = exact(parsed, spec.name, **mig, **dict(spec.variant))
        assert got == (expected(spec, raw_for(spec)) if spec.mig else None), spec.key
    assert value(parsed, "gpu_mig_info", **mig, mig_uuid="MIG-aaaa", name="NVIDIA H100 80GB HBM3 MIG 3g.40gb") == 1
    info = dict(name="NVIDIA H100 80GB HBM3", driver_version="550.54.15", cuda_version="12.4", mig_mode="disabled")
    assert value(parsed, "gpu_info", **gpu_labels(0), **info, pci_bus_id="00000000:18:00.0", minor_number="0") == 1
    assert value(parsed, "gpu_info", **gpu_labels(1), mig_mode="enabled") == 1
    assert value(parsed, "gpu_clock_event_active", gpu="0", reason="hw_thermal") == 1
    assert value(parsed, "gpu_clock_event_active", gpu="0", reason="gpu_idle") == 0
    assert {reason for reason, _ in CLOCK_EVENT_REASONS} <= {
        dict(labels)["reason"] for labels in parsed["gpu_clock_event_active"]
    }
    assert value(parsed, "gpu_exporter_backend_info", backend="dcgm", reason="test") == 1
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert not any(parsed.get("gpu_exporter_sample_errors_total", {}).values())  # all 0
    assert run.not_ready() == ""


def test_base_unit_conversions_from_dcgm_units(runs: list[Run]) -> None:
    fake = host(1, mig_on_last=False)
    fake.values[(FE_GPU, 0)].update(
        {252: int64(1024), 155: double(612.345), 156: int64(123_456_789_012), 203: int64(97), 100: int64(1980)}
    )
    fake.values[(FE_GPU, 0)][240] = int64(1_500_000_000)
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_memory_used_bytes", gpu="0") == 1073741824.0  # MiB → bytes
    assert value(parsed, "gpu_power_watts", gpu="0") == 612.345  # already W
    assert value(parsed, "gpu_energy_joules_total", gpu="0") == 123456789.012  # mJ → J
    assert value(parsed, "gpu_utilization_ratio", gpu="0") == 0.97  # % → ratio
    assert value(parsed, "gpu_sm_clock_hertz", gpu="0") == 1.98e9  # MHz → Hz
    assert value(parsed, "gpu_clock_throttle_seconds_total", gpu="0", reason="power") == 1.5  # ns → s
    assert value(parsed, "gpu_sm_active_ratio", gpu="0") == 0.25  # DCGM's ratio as is


@pytest.mark.parametrize(
    ("raw", "counted"),
    [
        *[(raw, None) for why, raw in INT32_SENTINELS.items() if why != "perm"],
        *[(raw, None) for why, raw in INT64_SENTINELS.items() if why != "perm"],
        *[(raw, None) for why, raw in FP64_SENTINELS.items() if why != "perm"],
        *[(raw, None) for why, raw in STRING_SENTINELS.items() if why != "perm"],
        (INT32_SENTINELS["perm"], "no_permission"),
        (INT64_SENTINELS["perm"], "no_permission"),
        (FP64_SENTINELS["perm"], "no_permission"),
        (STRING_SENTINELS["perm"], "no_permission"),
        (failed(ST_NO_PERMISSION), "no_permission"),
        (failed(ST_NOT_WATCHED), None),
        (failed(-8), "nvml_error"),
    ],
    ids=lambda item: repr(item) if not isinstance(item, tuple) else f"{item[0]}:{item[1]!r}",
)
def test_blank_sentinels_and_failed_reads_are_absent(runs: list[Run], raw: Raw, counted: str | None) -> None:
    fake = host(1, mig_on_last=False)
    fake.values[(FE_GPU, 0)][150] = raw  # temperature
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_temperature_celsius", gpu="0") is None
    assert value(parsed, "gpu_power_watts", gpu="0") == 250.5  # the rest of the GPU is untouched
    errors = {dict(labels)["kind"]: v for labels, v in parsed.get("gpu_exporter_sample_errors_total", {}).items() if v}
    assert errors == ({counted: 1} if counted else {})


def test_not_supported_is_absent_and_logged_once(runs: list[Run], caplog: pytest.LogCaptureFixture) -> None:
    fake = host(1, mig_on_last=False)
    fake.values[(FE_GPU, 0)][191] = INT64_SENTINELS["not_supported"]  # fan speed
    fake.values[(FE_GPU, 0)][140] = failed(-6)  # memory temperature: status NOT_SUPPORTED
    run = Run(fake)
    runs.append(run)
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            parsed = run.cycle()
    assert value(parsed, "gpu_fan_speed_ratio", gpu="0") is None
    assert value(parsed, "gpu_memory_temperature_celsius", gpu="0") is None
    assert not any(parsed.get("gpu_exporter_sample_errors_total", {}).values())  # all 0
    # the driver's words: a debug line (the info line counts the values the GPU lacks)
    assert caplog.text.count("DCGM field 191 (gpu_fan_speed_ratio) is not supported") == 1
    assert caplog.text.count("DCGM field 140") == 1


def test_profiling_only_when_enabled(runs: list[Run]) -> None:
    run = Run(host(1, mig_on_last=False), collectors=frozenset(DEFAULT_COLLECTORS - {"profiling"}))
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_power_watts", gpu="0") == 250.5
    assert not PROFILING_NAMES & set(parsed)
    assert not any(1001 <= f <= 1099 for watch in run.fake.watches.values() for f in watch.fields)


def test_profiling_checked_per_gpu_model_not_per_node(runs: list[Run]) -> None:
    fake = FakeDcgm()
    fake.globals = {1: string("550.54.15")}
    fake.add_gpu(0, {**full_fields(), **identity(0, "NVIDIA H100 80GB HBM3")}, profiling=PROFILING_FIELDS)
    fake.add_gpu(1, {**full_fields(), **identity(1, "Tesla T4")}, profiling=frozenset({1001, 1002, 1005, 1009, 1010}))
    fake.add_gpu(2, {**full_fields(), **identity(2, "Quadro RTX")}, profiling=ST_PROFILING_NOT_SUPPORTED)
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_tensor_pipe_active_ratio", gpu="0") == 0.25
    assert value(parsed, "gpu_nvlink_transmit_bytes_per_second", gpu="0") == 3.5e9
    assert value(parsed, "gpu_sm_active_ratio", gpu="1") == 0.25
    assert value(parsed, "gpu_tensor_pipe_active_ratio", gpu="1") is None  # not in the T4's metric groups
    assert value(parsed, "gpu_nvlink_transmit_bytes_per_second", gpu="1") is None
    assert value(parsed, "gpu_sm_active_ratio", gpu="2") is None  # no profiling at all on this model
    assert value(parsed, "gpu_power_watts", gpu="2") == 250.5
    profiling_watches = [w for w in fake.watches.values() if any(1001 <= f <= 1099 for f in w.fields)]
    assert sorted(sorted(w.fields) for w in profiling_watches) == [
        sorted(PROFILING_FIELDS),
        [1001, 1002, 1005, 1009, 1010],
    ]
    assert not any(parsed.get("gpu_exporter_sample_errors_total", {}).values())  # all 0  # unsupported is not an error


@pytest.mark.parametrize(
    ("status", "kind", "fix"),
    [
        (ST_PROFILING_LIBRARY_ERROR, "profiling_in_use", "dcgmi profile --pause"),
        (ST_REQUIRES_ROOT, "profiling_no_permission", "NVreg_RestrictProfilingToAdminUsers=0"),
    ],
)
def test_profiling_locked_fails_only_the_profiling_collector(
    runs: list[Run], caplog: pytest.LogCaptureFixture, status: int, kind: str, fix: str
) -> None:
    fake = host()
    fake.profiling_watch_error = status
    run = Run(fake)
    runs.append(run)
    with caplog.at_level(logging.INFO):
        first = run.cycle()
        second = run.cycle()
    for parsed in (first, second):
        assert not PROFILING_NAMES & set(parsed)
        assert value(parsed, "gpu_power_watts", gpu="0") == 250.5  # everything else keeps working
        assert value(parsed, "gpu_memory_used_bytes", gpu_instance="1") == 1024 * 2**20
        assert value(parsed, "gpu_exporter_backend_up") == 1
        assert value(parsed, "gpu_up", gpu="1") == 1
    assert value(first, "gpu_exporter_sample_errors_total", kind=kind) == 2  # one per GPU read
    assert value(second, "gpu_exporter_sample_errors_total", kind=kind) == 4
    lines = [r for r in caplog.records if "profiling metrics unavailable" in r.getMessage()]
    assert len(lines) == 1 and fix in lines[0].getMessage() and lines[0].levelno == logging.WARNING
    assert run.not_ready() == ""
    # the lock is released: the watch is retried a minute later and profiling comes back
    fake.profiling_watch_error = None
    parsed = run.cycle(advance=PROFILING_RETRY_SECONDS + 1)
    assert value(parsed, "gpu_sm_active_ratio", gpu="0") == 0.25
    assert value(parsed, "gpu_sm_active_ratio", gpu="1", gpu_instance="1") == 0.25
    assert value(parsed, "gpu_exporter_sample_errors_total", kind=kind) == 4  # no longer growing


def test_connection_lost_then_restored_without_restart(runs: list[Run], caplog: pytest.LogCaptureFixture) -> None:
    fake = host()
    run = Run(fake)
    runs.append(run)
    assert value(run.cycle(), "gpu_power_watts", gpu="0") == 250.5
    fake.lose_connection()
    run.cycle(advance=1)  # reads fail: the GPUs cannot be read
    parsed = run.cycle(advance=1)  # re-enumeration fails: the backend is down
    assert value(parsed, "gpu_exporter_backend_up") == 0
    assert value(parsed, "gpu_exporter_backend_info", backend="dcgm", reason="connection_lost") == 1
    assert value(parsed, "gpu_power_watts", gpu="0") is None  # nothing stale is served as current
    assert "dcgm backend is down (connection_lost)" in run.not_ready()
    for _ in range(3):  # retries while the engine is away, with backoff
        parsed = run.cycle(advance=5)
        assert value(parsed, "gpu_exporter_backend_up") == 0
    fake.restore()
    parsed = run.cycle(advance=60)
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert value(parsed, "gpu_power_watts", gpu="0") == 250.5
    assert value(parsed, "gpu_sm_active_ratio", gpu="1", gpu_instance="1") == 0.25
    assert value(parsed, "gpu_up", gpu="0") == 1
    assert value(parsed, "gpu_exporter_backend_info", backend="dcgm", reason="test") == 1
    assert run.not_ready() == ""
    assert fake.connects == 2 and fake.connected_to == "localhost:5555"  # the same mode as before
    assert caplog.text.count("DCGM connection lost (") == 1


def test_a_lost_gpu_goes_down_alone(runs: list[Run]) -> None:
    fake = host()
    run = Run(fake)
    runs.append(run)
    run.cycle()
    fake.values[(FE_GPU, 0)][150] = failed(ST_GPU_IS_LOST)
    parsed = run.cycle(advance=1)
    assert value(parsed, "gpu_up", gpu="0") == 0
    assert value(parsed, "gpu_up", gpu="1") == 1
    assert value(parsed, "gpu_power_watts", gpu="1") == 250.5
    assert value(parsed, "gpu_exporter_backend_up") == 1


def test_xid_counts_every_value_recorded_between_reads(runs: list[Run]) -> None:
    fake = host()
    fake.record_xid(FE_GPU, 0, 13)  # before the exporter started: not counted
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="13") == 0
    for code in (79, 79, 31):
        fake.record_xid(FE_GPU, 0, code)
    fake.record_xid(FE_GPU_CI, 11, 43)  # on GPU 1's MIG compute instance
    parsed = run.cycle(advance=1)
    assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="79") == 2
    assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="31") == 1
    assert value(parsed, "gpu_xid_errors_total", gpu="1", xid="43") == 1
    assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="13") == 0
    assert value(parsed, "gpu_xid_last_timestamp_seconds", gpu="0") == fake.xids[3][0] / 1e6
    parsed = run.cycle(advance=1)  # nothing new: nothing counted twice
    assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="79") == 2
    fake.record_xid(FE_GPU, 0, 79)
    parsed = run.cycle(advance=1)
    assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="79") == 3
    tally = run.sampler._tallies.tally("GPU-00000000-0000-0000-0000-000000000000")
    # recent Xids (with their times) are kept only for dcgm-exporter's windowed counts, not under native names
    assert tally.last_xid == 79 and tally.recent == ()


def test_groups_are_named_uniquely_and_stale_ones_removed(runs: list[Run]) -> None:
    fake = host()
    fake.stale = {f"{GROUP_PREFIX}4242-beef-gpu0", "someone-else"}
    run = Run(fake, interval=2.0)
    runs.append(run)
    run.cycle()
    assert fake.stale == {"someone-else"}
    assert all(name.startswith(GROUP_PREFIX) for name in fake.watches)
    needs = {name.rsplit("-", 1)[1] for name in fake.watches}
    # need, field chunk: the GPU fields take one group per 128 fields (DCGM's limit per field group)
    chunks = len([need for need in needs if need.startswith("gpu")])
    assert needs == {"identity", "mig0", "prof10", "xid0"} | {f"gpu{i}" for i in range(chunks)}
    for name, watch in fake.watches.items():
        if not name.endswith("identity"):
            assert watch.update_us == 2_000_000  # the collect interval
            assert watch.keep_age_s <= 60  # a short keep-age
    mig_watch = next(w for n, w in fake.watches.items() if n.endswith("mig0"))
    assert mig_watch.entities == ((FE_GPU_CI, 11),) and set(mig_watch.fields) == {250, 251, 252}
    # identity at start, then one fetch per GPU (and its MIG instances) per 128 due fields per cycle:
    # the first cycle reads every field, later ones only those due every cycle (one fetch per GPU)
    assert fake.latest_calls == 1 + 2 * chunks
    run.cycle(advance=2)
    assert fake.latest_calls == 1 + 2 * chunks + 2


def test_gpu_nvlinks_state_and_error_counters_per_link(runs: list[Run]) -> None:
    fake = host()
    fake.set_gpu_links(0, {0: LINK_STATE_UP, 1: LINK_STATE_DOWN, 2: LINK_STATE_DISABLED, 17: LINK_STATE_UP})
    # crc_data link 0 and link 17 (the last block of DCGM's per-link ids), replay link 2, recovery link 1
    fake.values[(FE_GPU, 0)].update({410: int64(3), 486: int64(11), 422: int64(9), 431: int64(1)})
    fake.values[(FE_GPU, 0)][420] = INT64_SENTINELS["not_supported"]  # replay link 0: absent, not 0
    run = Run(fake, ALL | {"nvlink"})
    runs.append(run)
    parsed = run.cycle()
    gpu0 = gpu_labels(0)
    up = {link: exact(parsed, "gpu_nvlink_up", **gpu0, nvlink=str(link)) for link in (0, 1, 2, 17)}
    assert up == {0: 1.0, 1: 0.0, 2: 0.0, 17: 1.0}
    errors = "gpu_nvlink_errors_total"
    assert exact(parsed, errors, **gpu0, nvlink="0", type="crc_data") == 3
    assert exact(parsed, errors, **gpu0, nvlink="17", type="crc_data") == 11
    assert exact(parsed, errors, **gpu0, nvlink="2", type="replay") == 9
    assert exact(parsed, errors, **gpu0, nvlink="1", type="recovery") == 1
    assert exact(parsed, errors, **gpu0, nvlink="0", type="replay") is None
    # Links without a value (no sample yet) are absent rather than 0; GPU 1 has no NVLink at all.
    assert exact(parsed, errors, **gpu0, nvlink="1", type="crc_data") is None
    assert not any(("gpu", "1") in labels for labels in parsed.get("gpu_nvlink_up", {}))
    # DCGM has no per-link byte counters (only a whole-MB/s rate): not served rather than faked.
    assert "gpu_nvlink_transmit_bytes_total" not in parsed
    links = next(w for name, w in fake.watches.items() if name.endswith("-links0"))
    assert links.entities == ((FE_GPU, 0),)
    # per type (crc_flit, crc_data, replay, recovery), links 0, 1, 2 and 17
    assert set(links.fields) == {400, 401, 402, 483, 410, 411, 412, 486, 420, 421, 422, 489, 430, 431, 432, 493}
    # States are read every cycle: a link coming up shows without re-enumeration.
    fake.link_state[(FE_GPU, 0, 1)] = LINK_STATE_UP
    calls = fake.link_state_calls
    parsed = run.cycle()
    assert exact(parsed, "gpu_nvlink_up", **gpu0, nvlink="1") == 1.0
    # One status call by each reader of a GPU with ports, one by the fabric worker (notices new ports).
    assert calls + 2 <= fake.link_state_calls <= calls + 3


def test_nvlink_collector_off_reads_no_link_state(runs: list[Run]) -> None:
    fake = host()
    fake.set_gpu_links(0, {0: LINK_STATE_UP})
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert not any(name.startswith("gpu_nvlink_") and "bytes_per_second" not in name for name in parsed)
    assert fake.link_state_calls == 0  # discovery only (entities() reads the states directly)
    assert not any(name.endswith("-links0") for name in fake.watches)


def switch_fields(switch: int) -> dict[int, Raw]:
    return {
        858: int64(47), 859: int64(95), 860: int64(105),
        705: int64(31), 706: int64(12), 707: int64(4), 701: int64(850), 864: int64(0),
        863: int64(switch + 8), 866: int64(0), 867: int64(0x05 + switch), 868: int64(0), 869: int64(0),
    }  # fmt: skip


def test_nvswitch_metrics_ports_and_sxids(runs: list[Run]) -> None:
    fake = host()
    port_errors = {784: int64(7), 785: int64(1), 786: int64(0), 787: int64(5)}
    fake.add_nvswitch(0, [0, 1], switch_fields(0), down_ports=[2], port_fields={0: port_errors})
    blank_temperature = {**switch_fields(1), 858: INT64_SENTINELS["blank"]}
    fake.add_nvswitch(1, [3], blank_temperature, port_fields={3: {788: failed(ST_NO_PERMISSION)}})
    run = Run(fake, ALL | {"nvswitch"})
    runs.append(run)
    parsed = run.cycle()
    info = parsed["gpu_nvswitch_info"]
    assert info == {
        frozenset({("nvswitch", "0"), ("pci_bus_id", "00000000:05:00.0"), ("physical_id", "8")}): 1.0,
        frozenset({("nvswitch", "1"), ("pci_bus_id", "00000000:06:00.0"), ("physical_id", "9")}): 1.0,
    }
    assert exact(parsed, "gpu_nvswitch_temperature_celsius", nvswitch="0") == 47
    assert exact(parsed, "gpu_nvswitch_temperature_celsius", nvswitch="1") is None  # blank: absent, not 0
    assert exact(parsed, "gpu_nvswitch_temperature_slowdown_threshold_celsius", nvswitch="0") == 95
    assert exact(parsed, "gpu_nvswitch_power_watts", nvswitch="0", rail="dvdd") == 12
    assert exact(parsed, "gpu_nvswitch_voltage_volts", nvswitch="1") == 0.85
    assert exact(parsed, "gpu_nvswitch_reset_required", nvswitch="0") == 0
    ports_up = {labels: v for labels, v in parsed["gpu_nvswitch_nvlink_up"].items()}
    assert ports_up == {
        frozenset({("nvswitch", "0"), ("nvlink", "0")}): 1.0,
        frozenset({("nvswitch", "0"), ("nvlink", "1")}): 1.0,
        frozenset({("nvswitch", "0"), ("nvlink", "2")}): 0.0,
        frozenset({("nvswitch", "1"), ("nvlink", "3")}): 1.0,
    }
    errors = "gpu_nvswitch_nvlink_errors_total"
    assert exact(parsed, errors, nvswitch="0", nvlink="0", type="replay") == 7
    assert exact(parsed, errors, nvswitch="0", nvlink="0", type="crc") == 5
    assert exact(parsed, errors, nvswitch="0", nvlink="0", type="ecc") is None  # never sampled
    assert exact(parsed, errors, nvswitch="1", nvlink="3", type="ecc") is None
    assert {dict(labels)["type"] for labels in parsed[errors]} <= {"replay", "recovery", "flit", "crc", "ecc"}
    assert value(parsed, "gpu_exporter_sample_errors_total", kind="no_permission") >= 1
    # SXids: the latest one DCGM holds, by severity; none held is no series (never a 0 or a count).
    assert "gpu_nvswitch_last_sxid" not in parsed
    fake.values[(FE_SWITCH, 0)][856] = int64(12028)
    fake.values[(FE_SWITCH, 0)][864] = int64(1)
    parsed = run.cycle()
    assert parsed["gpu_nvswitch_last_sxid"] == {frozenset({("nvswitch", "0"), ("severity", "fatal")}): 12028.0}
    assert exact(parsed, "gpu_nvswitch_reset_required", nvswitch="0") == 1
    assert exact(parsed, "gpu_nvswitch_temperature_slowdown_threshold_celsius", nvswitch="0") == 95  # every cycle
    # The engine goes away: switch series vanish with the GPUs' rather than showing old values.
    fake.lose_connection()
    parsed = run.cycle()
    assert not any(name.startswith("gpu_nvswitch_") and parsed[name] for name in parsed)


def test_nvswitch_collector_off_watches_no_switch(runs: list[Run]) -> None:
    fake = host()
    fake.add_nvswitch(0, [0], switch_fields(0))
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert not any(name.startswith("gpu_nvswitch_") for name in parsed)
    assert not any(name.endswith(("-switch0", "-ports0")) for name in fake.watches)


def test_ports_appearing_or_going_away_rebuild_the_watches(runs: list[Run]) -> None:
    fake = host()
    fake.set_gpu_links(0, {0: LINK_STATE_UP})
    fake.add_nvswitch(0, [0], switch_fields(0))
    run = Run(fake, ALL | {"nvlink", "nvswitch"})
    runs.append(run)
    parsed = run.cycle()
    assert set(parsed["gpu_nvswitch_nvlink_up"]) == {frozenset({("nvswitch", "0"), ("nvlink", "0")})}
    # A GPU link and a switch port that were not there at start (the switch module attached late).
    fake.set_gpu_links(0, {5: LINK_STATE_UP})
    fake.link_state[(FE_SWITCH, 0, 7)] = LINK_STATE_DOWN
    fake.values[(FE_GPU, 0)][415] = int64(4)  # crc_data, link 5
    parsed = run.cycle()
    assert exact(parsed, "gpu_nvlink_up", **gpu_labels(0), nvlink="5") == 1
    assert exact(parsed, "gpu_nvlink_errors_total", **gpu_labels(0), nvlink="5", type="crc_data") == 4
    assert exact(parsed, "gpu_nvswitch_nvlink_up", nvswitch="0", nvlink="7") == 0
    links = next(w for name, w in fake.watches.items() if name.endswith("-links0"))
    assert 415 in links.fields
    # A port that stops existing (its state turns "not supported") goes away rather than reading 0.
    del fake.link_state[(FE_GPU, 0, 0)]
    parsed = run.cycle()
    assert exact(parsed, "gpu_nvlink_up", **gpu_labels(0), nvlink="0") is None
    assert exact(parsed, "gpu_nvlink_up", **gpu_labels(0), nvlink="5") == 1
    assert value(parsed, "gpu_exporter_backend_up") == 1


def test_link_status_failure_makes_states_absent_not_zero(runs: list[Run]) -> None:
    fake = host()
    fake.set_gpu_links(0, {0: LINK_STATE_UP})
    run = Run(fake, ALL | {"nvlink"})
    runs.append(run)
    assert exact(run.cycle(), "gpu_nvlink_up", **gpu_labels(0), nvlink="0") == 1
    fake.link_status_error = ST_NO_PERMISSION
    parsed = run.cycle()
    assert exact(parsed, "gpu_nvlink_up", **gpu_labels(0), nvlink="0") is None
    assert value(parsed, "gpu_exporter_sample_errors_total", kind="no_permission") >= 1
    assert exact(parsed, "gpu_power_watts", **gpu_labels(0)) is not None
    fake.link_status_error = None
    assert exact(run.cycle(), "gpu_nvlink_up", **gpu_labels(0), nvlink="0") == 1


def test_a_refused_nvswitch_watch_costs_only_its_own_series(runs: list[Run]) -> None:
    fake = host()
    fake.add_nvswitch(0, [0], switch_fields(0), port_fields={0: {784: int64(3)}})
    fake.watch_errors = {"-switch0": ST_NOT_SUPPORTED}
    run = Run(fake, ALL | {"nvswitch"})
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert exact(parsed, "gpu_power_watts", **gpu_labels(0)) is not None
    assert exact(parsed, "gpu_nvswitch_temperature_celsius", nvswitch="0") is None
    assert exact(parsed, "gpu_nvswitch_nvlink_errors_total", nvswitch="0", nvlink="0", type="replay") == 3


# --- choosing the backend --------------------------------------------------------------------


def use_fake(monkeypatch: pytest.MonkeyPatch, fake: FakeDcgm) -> None:
    def factory() -> DcgmAdapter:
        return fake

    monkeypatch.setattr(adapter_module, "load_adapter", factory)


@pytest.mark.parametrize(
    ("reachable", "address", "reason", "connected_to"),
    [
        ({"localhost:5555", None}, "", "auto: DCGM standalone localhost:5555", "localhost:5555"),
        ({None}, "", "auto: DCGM embedded", None),
        ({"10.0.0.7:5555"}, "10.0.0.7:5555", "auto: DCGM standalone 10.0.0.7:5555", "10.0.0.7:5555"),
    ],
)
def test_auto_picks_dcgm_in_the_documented_order(
    monkeypatch: pytest.MonkeyPatch, reachable: set[str | None], address: str, reason: str, connected_to: str | None
) -> None:
    fake = host()
    fake.reachable = reachable
    use_fake(monkeypatch, fake)
    backend, why = select(Settings(backend="auto", dcgm_address=address))
    try:
        assert isinstance(backend, DcgmBackend) and why == reason and fake.connected_to == connected_to
    finally:
        backend.close()


def test_auto_falls_back_to_nvml_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = host()
    fake.reachable = set()
    use_fake(monkeypatch, fake)
    with caplog.at_level(logging.INFO):
        backend, why = select(Settings(backend="auto"))
    assert isinstance(backend, NvmlBackend)
    assert why.startswith("auto: DCGM not available (localhost:5555: connecting to localhost:5555: connection refused")
    assert caplog.text.count("not using DCGM") == 1
    empty = FakeDcgm()
    use_fake(monkeypatch, empty)
    backend, why = select(Settings(backend="auto"))
    assert isinstance(backend, NvmlBackend) and why == "auto: DCGM (standalone localhost:5555) sees no GPU"
    assert not empty.connected


def test_backend_dcgm_requested(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = host()
    use_fake(monkeypatch, fake)
    backend, why = select(Settings(backend="dcgm"))
    backend.close()
    assert isinstance(backend, DcgmBackend) and why == "requested (standalone localhost:5555)"
    fake.reachable = set()
    with pytest.raises(Exception, match="start nv-hostengine") as raised:
        select(Settings(backend="dcgm", dcgm_address="10.1.1.1:5555"))
    assert "10.1.1.1:5555" in str(raised.value) and "--backend nvml" in str(raised.value)


# --- out of process, on a host without DCGM ----------------------------------------------------


def no_dcgm_here() -> None:
    if os.path.isdir(DCGM4_BINDINGS) or os.path.isdir(DCGM3_BINDINGS):
        pytest.skip("DCGM is installed on this host: the no-DCGM behaviour cannot be shown here")


# --- the host engine's rules: refused GPUs, group limits, no profiling module ----------------------


def test_a_gpu_lost_before_start_is_down_alone_and_joins_when_the_engine_groups_it(
    runs: list[Run], caplog: pytest.LogCaptureFixture
) -> None:
    fake = host(3, mig_on_last=False)
    fake.entity_status[(FE_GPU, 1)] = ST_GPU_IS_LOST  # e.g. Xid 79, then an exporter restart
    run = Run(fake)
    runs.append(run)
    with caplog.at_level(logging.INFO):
        parsed = run.cycle()
    assert value(parsed, "gpu_exporter_backend_up") == 1
    for gpu in (0, 2):
        assert exact(parsed, "gpu_up", **gpu_labels(gpu)) == 1
        assert value(parsed, "gpu_power_watts", gpu=str(gpu)) == 250.5
    # Never identified: DCGM id as index, a placeholder UUID (no identity field of an ungrouped GPU).
    assert exact(parsed, "gpu_up", gpu="1", uuid="GPU-dcgm-1") == 0
    assert exact(parsed, "gpu_exporter_device_down", gpu="1", uuid="GPU-dcgm-1", reason="lost") == 1
    assert value(parsed, "gpu_power_watts", gpu="1") is None
    assert run.not_ready() == ""
    assert all((FE_GPU, 1) not in w.entities for w in fake.watches.values())
    assert "DCGM GPU id 1 is left out of every group: DCGM reports the GPU lost" in caplog.text
    del fake.entity_status[(FE_GPU, 1)]  # the engine accepts it again (GPU reset)
    for _ in range(4):
        parsed = run.cycle(advance=31)
    assert exact(parsed, "gpu_up", **gpu_labels(1)) == 1
    assert value(parsed, "gpu_power_watts", gpu="1") == 250.5
    assert value(parsed, "gpu_power_watts", gpu="0") == 250.5


def test_a_gpu_lost_at_runtime_then_a_watch_rebuild_costs_only_that_gpu(runs: list[Run]) -> None:
    fake = host(2, mig_on_last=False)
    run = Run(fake)
    runs.append(run)
    run.cycle()
    fake.xids.clear()
    fake.record_xid(FE_GPU, 0, 79)
    fake.lose_gpu(0)  # fell off the bus: blank values with status OK, the engine's status Lost (4.x)
    for _ in range(2):
        parsed = run.cycle(advance=1)
    assert exact(parsed, "gpu_up", **gpu_labels(0)) == 0
    fake.add_mig(1, 7, 1, 11, 0, "3g.40gb", {250: int64(40_000), 252: int64(1024), 54: string("MIG-b")})
    for _ in range(3):  # the entity list changed: the watches are rebuilt, without GPU 0
        parsed = run.cycle(advance=31)
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert exact(parsed, "gpu_up", **gpu_labels(0)) == 0  # its identity kept from before it was lost
    assert exact(parsed, "gpu_up", **gpu_labels(1)) == 1
    assert value(parsed, "gpu_power_watts", gpu="1") == 250.5
    assert value(parsed, "gpu_memory_used_bytes", gpu="1", gpu_instance="1") == 1024 * 2**20
    tally = run.sampler._tallies.tally(gpu_labels(0)["uuid"])
    assert tally.last_xid == 79 and tally.xid.get(79) == 1  # kept by UUID across the rebuild
    assert run.not_ready() == ""


def test_every_gpu_refused_leaves_the_backend_up_and_readiness_false(runs: list[Run]) -> None:
    fake = host(2, mig_on_last=False)
    fake.entity_status = {(FE_GPU, 0): ST_GPU_NOT_SUPPORTED, (FE_GPU, 1): ST_BADPARAM}
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert exact(parsed, "gpu_up", gpu="0", uuid="GPU-dcgm-0") == 0
    assert exact(parsed, "gpu_up", gpu="1", uuid="GPU-dcgm-1") == 0
    assert run.not_ready().startswith("no GPU sampled successfully")


def test_eight_gpus_with_seven_mig_instances_each_on_a_3x_engine(runs: list[Run]) -> None:
    fake = FakeDcgm()
    fake.group_limit = 64  # DCGM 3.x
    fake.globals = {1: string("550.54.15")}
    mig_fields = {spec.dcgm.field_id: raw_for(spec) for spec in METRICS if spec.dcgm is not None and spec.mig}
    for gpu in range(8):
        fake.add_gpu(gpu, {**full_fields(), **identity(gpu, mig=1)}, profiling=PROFILING_FIELDS)
        for slot in range(7):
            gi = 100 * gpu + slot
            fake.add_mig(gpu, gi, slot + 1, 1000 + gi, 0, "1g.10gb", {**mig_fields, 54: string(f"MIG-{gi}")})
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert all(len(w.entities) <= 64 for w in fake.watches.values())
    for gpu in range(8):
        assert value(parsed, "gpu_power_watts", gpu=str(gpu)) == 250.5
        for slot in range(7):
            labels = {"gpu": str(gpu), "gpu_instance": str(slot + 1)}
            assert value(parsed, "gpu_memory_used_bytes", **labels) == 1024 * 2**20
            assert value(parsed, "gpu_sm_active_ratio", **labels) == 0.25
    watched = {e for w in fake.watches.values() if 230 in w.fields for e in w.entities}
    assert len(watched) == 8 + 56 + 56  # Xids: every GPU, GPU instance and compute instance
    fake.record_xid(FE_GPU_CI, 1000 + 706, 43)  # on the last GPU's last compute instance
    parsed = run.cycle(advance=1)
    assert value(parsed, "gpu_xid_errors_total", gpu="7", xid="43") == 1


@pytest.mark.parametrize("where", ["support", "watch"])
def test_profiling_module_not_loaded_is_unavailable_not_a_failure(
    runs: list[Run], caplog: pytest.LogCaptureFixture, where: str
) -> None:
    fake = host()
    if where == "support":
        fake.profiling_support = {0: ST_MODULE_NOT_LOADED, 1: ST_MODULE_NOT_LOADED}
    else:
        fake.profiling_watch_error = ST_MODULE_NOT_LOADED
    run = Run(fake)
    runs.append(run)
    with caplog.at_level(logging.INFO):
        first = run.cycle()
        later = run.cycle(advance=PROFILING_RETRY_SECONDS + 1)
        last = run.cycle(advance=10 * PROFILING_RETRY_SECONDS)
    fake.profiling_watch_error = None
    for parsed in (first, later, last):
        assert not PROFILING_NAMES & set(parsed)
        assert value(parsed, "gpu_power_watts", gpu="0") == 250.5
        assert not any(
            parsed.get("gpu_exporter_sample_errors_total", {}).values()
        )  # all 0  # not a failure, counted nowhere
    lines = [r for r in caplog.records if "profiling metrics are not available (module_not_loaded)" in r.getMessage()]
    assert len(lines) == 1 and "--denylist-modules" in lines[0].getMessage()
    assert not any(1001 <= f <= 1099 for w in fake.watches.values() for f in w.fields)  # and never retried


def test_auto_does_not_pick_dcgm_when_it_refuses_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = host(2, mig_on_last=False)
    fake.entity_status = {(FE_GPU, 0): ST_GPU_NOT_SUPPORTED, (FE_GPU, 1): ST_GPU_NOT_SUPPORTED}  # GeForce
    use_fake(monkeypatch, fake)
    backend, why = select(Settings(backend="auto"))
    assert isinstance(backend, NvmlBackend) and why == "auto: DCGM (standalone localhost:5555) sees no GPU"
    fake.entity_status = {(FE_GPU, 0): ST_GPU_NOT_SUPPORTED}
    backend, why = select(Settings(backend="auto"))
    try:
        assert isinstance(backend, DcgmBackend) and not fake.watches  # the probe group is gone
    finally:
        backend.close()
