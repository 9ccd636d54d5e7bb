"""A driver posts Xid 79 as the GPU falls off the bus: staged at the very instant of the loss
(``gpu2.xid = 79@0`` with ``gpu2.lost_after = 0``), each NVML double delivers it while the GPU already
answers as lost, and the exporter counts it. In-process: the real sampler over the NVML backend on each
double, stepped by hand on a clock of its own; the rewrite is polled for, not slept out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.nvml import NvmlBackend
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from tests.harness import SCENARIOS, samples, value
from tests.unit.nvml_doubles import DOUBLES, Load, nvml_double, rewrite

Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]
#: Seconds within which the double delivers the Xid and the sampler counts it (both look at least
#: every 250 ms); a healthy run takes a fraction of one.
DEADLINE = 15.0


class Clock:
    """The sampler's monotonic clock, which only the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=DOUBLES)
def double(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Load]]:
    with nvml_double(request.param, request, monkeypatch) as load:
        yield request.param, load


def test_an_xid_due_at_the_instant_of_loss_is_counted(double: tuple[str, Load], tmp_path: Path) -> None:
    name, load = double
    scenario = tmp_path / "host.scn"
    healthy = (SCENARIOS / "h100x4.scn").read_text()
    scenario.write_text(healthy)
    load(scenario)
    clock = Clock()
    specs = enabled_specs(DEFAULT_COLLECTORS)
    sampler = bare_sampler(NvmlBackend(), specs, 60.0, "test", watch_events=True, clock=clock)
    try:
        before = _cycle(sampler, clock)
        assert value(before, "gpu_up", gpu="2") == 1
        assert value(before, "gpu_xid_errors_total", gpu="2", xid="79") == 0  # pre-created
        rewrite(scenario, healthy + "gpu2.xid = 79@0\ngpu2.lost_after = 0\n")  # falls off the bus now
        deadline = time.monotonic() + DEADLINE
        parsed = _cycle(sampler, clock)
        while value(parsed, "gpu_xid_errors_total", gpu="2", xid="79") == 0:
            assert time.monotonic() < deadline, f"the {name}'s Xid 79 at the instant of the loss was never counted"
            time.sleep(0.05)  # polling for the double's event thread, not waiting out a cycle
            parsed = _cycle(sampler, clock)
    finally:
        sampler.stop()
    assert value(parsed, "gpu_xid_errors_total", gpu="2", xid="79") == 1
    assert value(parsed, "gpu_xid_errors_all_codes_total", gpu="2") == 1
    assert value(parsed, "gpu_up", gpu="2") == 0  # the GPU answers as lost
    assert value(parsed, "gpu_power_watts", gpu="2") is None  # its measured values go
    assert value(parsed, "gpu_xid_errors_all_codes_total", gpu="1") == 0  # and no other GPU is blamed


def _cycle(sampler: object, clock: Clock) -> Parsed:
    clock.now += 60.0
    snapshot = sampler.run_cycle()  # type: ignore[attr-defined]
    return samples(snapshot.rendered.text.decode())
