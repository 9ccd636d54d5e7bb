"""A pause on the DCGM backend (issue 37), in process on the fake adapter (tests/dcgmfake.py) and a fake
clock: a profiling pause rebuilds the watches without the profiling fields (the profiling module lets go
of the counters) and its series go, the rest keeps being read; a full pause removes every group and watch
and closes the connection, /metrics keeps answering with the exporter's own series, backend_up 0 and the
pause's end in backend_info, and no GPU series; either ends on its own or on resume, and everything comes
back with its counters intact."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.dcgm.backend import DcgmBackend
from gpu_exporter.catalogue import enabled_specs
from gpu_exporter.sampling.pause import Pauses
from tests.dcgmfake import FakeDcgm
from tests.harness import samples, value
from tests.unit.test_dcgm_backend import ALL, PROFILING_FIELDS, Clock, host

INTERVAL = 1.0
Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]


class PausedRun:
    """A Sampler on a DcgmBackend over ``fake`` with a pause holder, stepped by hand on a fake clock."""

    def __init__(self, fake: FakeDcgm) -> None:
        self.fake = fake
        self.clock = Clock()
        self.pauses = Pauses(self.clock, lambda: 1_800_000_000.0 + self.clock.now)
        specs = enabled_specs(ALL)
        self.sampler = bare_sampler(
            DcgmBackend(lambda: fake, specs, INTERVAL, clock=self.clock), specs, INTERVAL, "test",
            clock=self.clock, pauses=self.pauses,
        )  # fmt: skip

    def cycle(self) -> Parsed:
        self.clock.now += INTERVAL
        return samples(self.sampler.run_cycle().rendered.text.decode())

    def watched(self) -> set[int]:
        return {field for watch in self.fake.watches.values() for field in watch.fields}


@pytest.fixture
def run() -> Iterator[PausedRun]:
    started = PausedRun(host())
    yield started
    started.sampler.stop()


def test_a_profiling_pause_unwatches_the_profiling_fields_until_resumed(run: PausedRun) -> None:
    run.cycle()
    before = run.cycle()
    assert value(before, "gpu_sm_active_ratio", gpu="0") is not None and run.watched() >= PROFILING_FIELDS
    run.pauses.request("profiling", 600, "test")
    paused = run.cycle()
    assert not run.watched() & PROFILING_FIELDS  # the engine samples none of them: the lock is free
    assert run.fake.connected and value(paused, "gpu_exporter_backend_up") == 1
    assert value(paused, "gpu_sm_active_ratio", gpu="0") is None  # absent, never stale or 0
    assert value(paused, "gpu_temperature_celsius", gpu="0") is not None  # the rest goes on
    assert value(paused, "gpu_exporter_paused", scope="profiling") == 1
    assert value(paused, "gpu_exporter_paused", scope="full") == 0
    assert value(paused, "gpu_exporter_pause_end_timestamp_seconds", scope="profiling") == pytest.approx(
        1_800_000_000.0 + run.clock.now - INTERVAL + 600
    )
    run.pauses.resume()
    back = run.cycle()
    assert run.watched() >= PROFILING_FIELDS
    back = run.cycle()
    assert value(back, "gpu_sm_active_ratio", gpu="0") is not None
    assert value(back, "gpu_exporter_paused", scope="profiling") == 0
    assert value(back, "gpu_exporter_pause_end_timestamp_seconds", scope="profiling") is None


def test_a_full_pause_closes_the_connection_and_ends_on_its_own(run: PausedRun) -> None:
    run.cycle()
    run.fake.record_xid(1, 0, 79)  # FE_GPU 1
    before = run.cycle()
    assert value(before, "gpu_xid_errors_total", gpu="0", xid="79") == 1
    busy = value(before, "gpu_utilization_seconds_total", gpu="0")
    assert busy is not None
    connects = run.fake.connects
    left_at_disconnect: list[int] = []
    disconnect = run.fake.disconnect

    def disconnecting() -> None:  # what the engine still watches for us when we disconnect
        left_at_disconnect.append(len(run.fake.watches))
        disconnect()

    run.fake.disconnect = disconnecting  # type: ignore[method-assign]  # a spy on the fake
    run.pauses.request("full", 120, "test")
    paused = run.cycle()
    assert not run.fake.connected and run.fake.watches == {}  # groups and watches removed, connection closed
    assert left_at_disconnect == [0]  # removed by us first, not left to the engine
    assert value(paused, "gpu_exporter_backend_up") == 0
    assert value(paused, "gpu_exporter_paused", scope="full") == 1
    info = [dict(labels) for labels in paused["gpu_exporter_backend_info"]]
    assert info == [{"backend": "dcgm", "reason": "paused", "until": "2027-01-15T08:18:42Z"}], (
        info
    )  # 1.8e9 + 1002 + 120 s
    assert not any(name.startswith("gpu_") and not name.startswith("gpu_exporter_") for name in paused)
    assert "gpu_exporter_build_info" in paused
    calls = run.fake.latest_calls
    for _ in range(10):  # 10 s into the 2-minute pause: nothing asked of the engine, no reconnection
        paused = run.cycle()
        assert value(paused, "gpu_up", gpu="0") is None
    assert run.fake.latest_calls == calls and run.fake.connects == connects and not run.fake.connected
    run.clock.now += 120  # the pause ends on its own
    back = run.cycle()
    assert run.fake.connected and run.fake.connects == connects + 1 and run.watched() >= PROFILING_FIELDS
    back = run.cycle()
    assert value(back, "gpu_up", gpu="0") == 1 and value(back, "gpu_exporter_backend_up") == 1
    assert value(back, "gpu_exporter_paused", scope="full") == 0
    assert value(back, "gpu_xid_errors_total", gpu="0", xid="79") == 1  # counters intact
    after = value(back, "gpu_utilization_seconds_total", gpu="0")
    assert after is not None and after >= busy
    assert value(back, "gpu_power_limit_watts", gpu="0") is not None  # slow rows asked again at once


def test_resume_ends_a_full_pause_early(run: PausedRun) -> None:
    run.cycle()
    run.pauses.request("full", 600, "test")
    run.cycle()
    assert not run.fake.connected
    assert run.pauses.resume() is not None
    run.cycle()
    assert value(run.cycle(), "gpu_up", gpu="0") == 1
