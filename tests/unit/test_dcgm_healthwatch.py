"""DCGM's own health watches (gpu_exporter.backends.dcgm.healthwatch) on the in-process DCGM double, per
release: the systems set on the exporter's GPU group (and set again on a rebuilt one), incidents
translated into the health model (gpu_health_status, DCGM_EXP_GPU_HEALTH_STATUS's codes), and a check
that stalls or fails: counted, never in the way of a read, and "cannot tell" once its verdict is too
old. A fake clock and events say when; nothing sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gpu_exporter.backends.dcgm.healthwatch import CHECK_DEADLINE_SECONDS, CHECK_SECONDS, VERDICT_BOUND_SECONDS
from gpu_exporter.backends.dcgm.incidents import RESULT_FAIL, RESULT_WARN, SYSTEM_ALL, gpu_systems
from gpu_exporter.backends.dcgm.releases import parse_version
from gpu_exporter.catalogue import DEFAULT_COLLECTORS
from gpu_exporter.sampling.health import FAIL, WARN, GpuHealth, Health
from tests.dcgmfake import FakeDcgm, from_scenario
from tests.harness import SCENARIOS
from tests.unit.test_dcgm_backend import Run, exact

RELEASES = ["3.3.9", "4.4.2", "4.6.0"]
MEM, PCIE, DRIVER = 0x10, 0x1, 0x200
ST_NOT_SUPPORTED = -6


def _fake(release: str) -> FakeDcgm:
    """The 4-GPU scenario (GPUs 0 and 1 healthy by their fields) with incidents staged."""
    fake = from_scenario((SCENARIOS / "h100x4.scn").read_text())
    fake.release = release
    fake.__post_init__()
    fake.stage_incident(1, MEM, RESULT_FAIL, 4, "volatile DBE")  # DCGM_FR_VOLATILE_DBE_DETECTED
    fake.stage_incident(0, PCIE, RESULT_WARN, 3, "replays")  # DCGM_FR_PCI_REPLAY_RATE
    fake.stage_incident(0, DRIVER, RESULT_FAIL, 126, "recovery: reboot")  # DCGM_FR_GPU_RECOVERY_REBOOT
    fake.stage_incident(3, SYSTEM_ALL, RESULT_FAIL, 101, "Xid 79")  # a devastating Xid
    return fake


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.fake.health_stall and run.fake.health_stall.set()
        run.sampler.stop()


def _start(runs: list[Run], fake: FakeDcgm) -> Run:
    run = Run(fake, DEFAULT_COLLECTORS, interval=1.0)
    runs.append(run)
    run.cycle()
    assert run.backend._watches is not None, run.not_ready()
    return run


def _checked(run: Run) -> Health:
    """Make a check due, start it (or let a running one end), wait for it, and judge a cycle."""
    watch = run.backend._healthwatch
    watch.finished.clear()
    run.clock.now += CHECK_SECONDS
    watch.poll()
    assert watch.finished.wait(10), "the health check did not finish"
    return run.sampler.run_cycle().health


def _gpu(health: Health, index: int) -> GpuHealth:
    return next(gpu for gpu in health.gpus if gpu.index == index)


@pytest.mark.parametrize("release", RELEASES)
def test_incidents_drive_the_model_as_each_release_reports_them(runs: list[Run], release: str) -> None:
    run = _start(runs, _fake(release))
    names = run.backend._watches.health_groups if run.backend._watches else []
    assert names and all(
        run.fake.health_get(name) == gpu_systems(parse_version(release) or (0, 0, 0)) for name in names
    )
    health = _checked(run)
    mem = _gpu(health, 1).status_of("mem")
    assert mem is not None and (mem.status, mem.action, mem.code) == (
        FAIL,
        "reset_gpu",
        "DCGM_FR_VOLATILE_DBE_DETECTED",
    )
    pcie = _gpu(health, 0).status_of("pcie")
    assert pcie is not None and (pcie.status, pcie.code) == (WARN, "DCGM_FR_PCI_REPLAY_RATE")
    driver = _gpu(health, 0).status_of("driver")
    if release >= "4.6":  # the driver watch (the GPU recovery action) exists from 4.6
        assert driver is not None and (driver.action, driver.code) == ("reboot", "DCGM_FR_GPU_RECOVERY_REBOOT")
    else:
        assert driver is None or driver.code != "DCGM_FR_GPU_RECOVERY_REBOOT"
    whole = [f.code for f in _gpu(health, 3).findings if f.subsystem == "all"]
    assert whole == (["DCGM_FR_XID_ERROR"] if release >= "4.4" else [])  # devastating Xids (WATCH_ALL) from 4.4
    assert {"pcie", "nvlink", "mem", "inforom", "thermal", "power"} <= set(_gpu(health, 0).checked)


def test_a_rebuilt_group_gets_the_watches_again(runs: list[Run]) -> None:
    run = _start(runs, _fake("4.6.0"))
    before = list(run.backend._watches.health_groups if run.backend._watches else [])
    run.backend._rebuild(run.backend._adapter_now())
    after = run.backend._watches.health_groups if run.backend._watches else []
    assert after and set(after).isdisjoint(before)
    assert all(run.fake.health_get(name) == gpu_systems((4, 6, 0)) for name in after)
    assert _gpu(_checked(run), 1).status_of("mem") is not None


def test_a_stalled_check_is_counted_never_blocks_a_read_and_turns_to_cannot_tell(runs: list[Run]) -> None:
    fake = _fake("4.6.0")
    fake.health_stall = threading.Event()
    run = _start(runs, fake)
    watch = run.backend._healthwatch
    watch.poll()
    assert fake.health_check_started.wait(10)
    run.clock.now += CHECK_DEADLINE_SECONDS + 1
    watch.poll()  # notices the stall; starts no second check
    assert watch.take_counts() == {"health_check_stalled": 1}
    parsed = run.cycle()  # sampling goes on while the check hangs
    assert parsed["gpu_temperature_celsius"], "a cycle read no GPU while the health check stalled"
    assert watch.verdict() is None  # within the bound, before any answer: the fields alone
    run.clock.now += VERDICT_BOUND_SECONDS
    health = run.sampler.run_cycle().health
    finding = _gpu(health, 0).status_of("driver")
    assert finding is not None and finding.status == WARN and "cannot tell" in finding.reason
    assert fake.health_checks == 1
    watch.finished.clear()
    fake.health_stall.set()
    assert watch.finished.wait(10)
    assert _gpu(run.sampler.run_cycle().health, 1).status_of("mem") is not None


def test_a_failed_check_is_counted_and_its_old_verdict_expires(runs: list[Run]) -> None:
    fake = _fake("4.4.2")
    run = _start(runs, fake)
    assert _gpu(_checked(run), 1).status_of("mem") is not None
    fake.health_error = ST_NOT_SUPPORTED
    _checked(run)
    assert exact(run.cycle(), "gpu_exporter_sample_errors_total", kind="health_check_failed") == 1
    assert _gpu(run.sampler.run_cycle().health, 1).status_of("mem") is not None  # kept within the bound
    run.clock.now += VERDICT_BOUND_SECONDS
    finding = _gpu(run.sampler.run_cycle().health, 1).status_of("driver")
    assert finding is not None and "dcgmHealthCheck failed" in finding.reason
