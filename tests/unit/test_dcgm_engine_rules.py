"""The DCGM backend on engines of each release, as the fake models them from DCGM's C sources: a
field group with one id the release does not know is refused whole, a GPU lost at run time reads
blank values with status OK, samples age, 3.x packs NVLink port ids its own way, discovery may hang.
In process (the Sampler over the DcgmBackend over tests/dcgmfake.py), stepped by hand."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from gpu_exporter.assemble.backends import select
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.backends.dcgm.fields import wanted_fields
from gpu_exporter.backends.dcgm.releases import KNOWN, known_ids, parse_version
from gpu_exporter.backends.dcgm.values import FE_GPU, FE_SWITCH, ST_GPU_NOT_SUPPORTED, link_entity_id
from gpu_exporter.backends.nvml import NvmlBackend
from gpu_exporter.catalogue import METRICS, enabled_specs
from gpu_exporter.config import Settings
from tests.dcgmfake import FakeDcgm, int64
from tests.harness import REPO, samples
from tests.unit.test_dcgm_backend import ALL, Run, exact, gpu_labels, host, switch_fields, use_fake, value

RELEASES = ("3.3.9", "4.4.2", "4.6.0")


def on(release: str, gpus: int = 2) -> FakeDcgm:
    fake = host(gpus, mig_on_last=False)
    fake.release = release
    fake.__post_init__()  # the release's group limit
    return fake


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.sampler.stop()


def test_the_release_tables_grow_and_match_what_the_issue_measured() -> None:
    """Facts read from DCGM's dcgm_fields.cpp per tag: no release drops an id; 3.3.9 lacks the GPM
    support and platform fields, 4.4.2 lacks 175, 1507 and 1523 of the ids the exporter asks for."""
    tables = list(KNOWN.values())
    assert all(older <= newer for older, newer in zip(tables, tables[1:], strict=False))
    wanted = set(wanted_fields(METRICS))
    assert {94, *range(571, 578)} <= wanted - known_ids((3, 3, 9))
    assert {175, 1507, 1523} <= wanted - known_ids((4, 4, 2))
    assert wanted <= known_ids((4, 6, 0))
    assert known_ids((4, 4, 3)) == known_ids((4, 4, 2))  # an unlisted patch: what its predecessor knew
    assert parse_version("version:3.3.9;arch:x86_64;buildtype:Release") == (3, 3, 9)


@pytest.mark.parametrize("release", RELEASES)
def test_default_flags_serve_every_gpu_on_each_release(
    runs: list[Run], release: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = on(release)
    run = Run(fake, collectors=ALL)
    runs.append(run)
    with caplog.at_level(logging.INFO):
        parsed = run.cycle()
    assert value(parsed, "gpu_exporter_backend_up") == 1
    for gpu in (0, 1):
        assert exact(parsed, "gpu_up", **gpu_labels(gpu)) == 1
        assert value(parsed, "gpu_power_watts", gpu=str(gpu)) == 250.5
        assert value(parsed, "gpu_temperature_celsius", gpu=str(gpu)) is not None
    known = known_ids(parse_version(release) or (4, 6, 0))
    asked = {f for watch in fake.watches.values() for f in watch.fields}
    assert asked <= known  # nothing the engine would refuse
    missing = set(wanted_fields(enabled_specs(ALL))) - known
    lines = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(lines) == (1 if missing else 0), lines  # one line per connection, not one per id
    if missing:
        assert f"DCGM {release} does not know {len(missing)} field id(s)" in lines[0]
    assert "connection lost" not in caplog.text
    assert run.backend.not_served() == ({f"unknown to DCGM {release}": len(missing)} if missing else {})
    served = value(parsed, "gpu_exporter_fields_not_served", reason=f"unknown to DCGM {release}")
    assert served == (len(missing) if missing else None)


def test_an_engine_that_refuses_ids_its_library_knows_loses_only_those(
    runs: list[Run], caplog: pytest.LogCaptureFixture
) -> None:
    """A standalone engine older than the client library: the library says every id is known, the
    engine refuses the group; the refused ids are found by halving and only they are left out."""
    fake = on("4.4.2")
    fake.known_fields = lambda field_ids: frozenset(field_ids)  # type: ignore[method-assign]
    run = Run(fake)
    runs.append(run)
    with caplog.at_level(logging.WARNING):
        parsed = run.cycle()
    assert value(parsed, "gpu_exporter_backend_up") == 1
    assert value(parsed, "gpu_power_watts", gpu="0") == 250.5
    assert run.backend._watches is not None and run.backend._watches.unknown == {175, 1507, 1523} & set(
        wanted_fields(enabled_specs(ALL))
    )
    assert "refused field id(s)" in caplog.text and "connection lost" not in caplog.text
    assert not any(name.endswith("fieldprobe") for name in fake.watches)  # the probes are gone


@pytest.mark.parametrize("release", RELEASES)
def test_a_gpu_lost_at_run_time_is_down_as_lost_and_the_others_go_on(
    runs: list[Run], release: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = on(release, gpus=3)
    run = Run(fake)
    runs.append(run)
    run.cycle()
    fake.record_xid(FE_GPU, 1, 79)
    run.cycle(advance=1)
    fake.lose_gpu(1)
    with caplog.at_level(logging.INFO):
        parsed = run.cycle(advance=1)
        assert exact(parsed, "gpu_up", **gpu_labels(1)) == 1  # one blank read is not a loss yet
        parsed = run.cycle(advance=1)
    assert exact(parsed, "gpu_up", **gpu_labels(1)) == 0
    assert exact(parsed, "gpu_exporter_device_down", **gpu_labels(1), reason="lost") == 1
    for gpu in (0, 2):
        assert exact(parsed, "gpu_up", **gpu_labels(gpu)) == 1
        assert value(parsed, "gpu_power_watts", gpu=str(gpu)) == 250.5
    assert "DCGM GPU id 1: every watched value blank" in caplog.text
    tally = run.sampler._tallies.tally(gpu_labels(1)["uuid"])
    assert tally.xid.get(79) == 1  # its counters are kept
    for _ in range(3):  # re-enumerations (DCGM keeps listing it) keep it down, counters kept
        parsed = run.cycle(advance=31)
    assert exact(parsed, "gpu_up", **gpu_labels(1)) == 0
    assert run.sampler._tallies.tally(gpu_labels(1)["uuid"]).xid.get(79) == 1
    fake.recover_gpu(1)  # a reset brings it back: same UUID, values again
    for _ in range(4):
        parsed = run.cycle(advance=31)
    assert exact(parsed, "gpu_up", **gpu_labels(1)) == 1
    assert value(parsed, "gpu_power_watts", gpu="1") == 250.5


def test_a_gpu_whose_values_only_go_stale_stays_up_and_its_values_are_dropped(runs: list[Run]) -> None:
    fake = on("4.6.0")
    now = [time.time()]
    specs = enabled_specs(ALL)
    run = Run(fake)
    runs.append(run)
    run.sampler.stop()
    run.backend = DcgmBackend(lambda: fake, specs, 1.0, clock=run.clock, wall=lambda: now[0])
    from gpu_exporter.assemble import bare_sampler

    run.sampler = bare_sampler(run.backend, specs, 1.0, "test", watch_events=True, clock=run.clock)
    run.cycle()
    fake.aged = {(FE_GPU, 0): int((now[0] - 600) * 1e6)}  # the engine stopped updating GPU 0 600 s ago
    for _ in range(3):
        parsed = run.cycle(advance=1)
    assert exact(parsed, "gpu_up", **gpu_labels(0)) == 1  # the engine says it is fine
    assert value(parsed, "gpu_power_watts", gpu="0") is None  # but nothing 600 s old is served
    assert value(parsed, "gpu_power_watts", gpu="1") == 250.5
    assert (value(parsed, "gpu_exporter_sample_errors_total", kind="stale") or 0) >= 3


@pytest.mark.parametrize(("status", "reason"), [(ST_GPU_NOT_SUPPORTED, "unsupported"), (-1, "detached")])
def test_an_unsupported_or_detached_gpu_has_its_own_reason(runs: list[Run], status: int, reason: str) -> None:
    fake = on("4.6.0", gpus=2)
    fake.entity_status[(FE_GPU, 1)] = status
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert exact(parsed, "gpu_exporter_device_down", gpu="1", uuid="GPU-dcgm-1", reason=reason) == 1
    assert exact(parsed, "gpu_up", **gpu_labels(0)) == 1


def test_a_refused_gpu_accepted_later_takes_over_its_placeholder_at_once(
    runs: list[Run], caplog: pytest.LogCaptureFixture
) -> None:
    fake = on("4.6.0", gpus=2)
    fake.entity_status[(FE_GPU, 1)] = -18  # lost before the exporter started
    run = Run(fake)
    runs.append(run)
    parsed = run.cycle()
    assert exact(parsed, "gpu_up", gpu="1", uuid="GPU-dcgm-1") == 0
    del fake.entity_status[(FE_GPU, 1)]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        for _ in range(4):
            parsed = run.cycle(advance=31)
    assert exact(parsed, "gpu_up", **gpu_labels(1)) == 1
    assert not any(labels for labels in parsed.get("gpu_up", {}) if ("uuid", "GPU-dcgm-1") in labels)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # a recovery is no error
    assert "GPU 1 is identified now" in caplog.text


def test_3x_nvswitch_ports_use_the_3x_link_ids(runs: list[Run]) -> None:
    """On 3.x a port of switch 2 is entity (2 << 16 | port << 8 | 3); read with 4.3's packing, every
    port of a switch whose id is not 0 would be refused."""
    fake = on("3.3.9", gpus=1)
    fake.add_nvswitch(2, [0, 1], switch_fields(2), port_fields={1: {784: int64(7)}})
    assert fake.link_id(FE_SWITCH, 2, 1) == (2 << 16 | 1 << 8 | FE_SWITCH) != link_entity_id(FE_SWITCH, 2, 1)
    run = Run(fake, ALL | {"nvswitch"})
    runs.append(run)
    parsed = run.cycle()
    assert set(parsed["gpu_nvswitch_nvlink_up"]) == {
        frozenset({("nvswitch", "2"), ("nvlink", "0")}), frozenset({("nvswitch", "2"), ("nvlink", "1")}),
    }  # fmt: skip
    errors = {dict(labels).get("type"): v for labels, v in parsed["gpu_nvswitch_nvlink_errors_total"].items()
              if ("nvlink", "1") in labels}  # fmt: skip
    assert 7 in errors.values()


def test_a_hung_discovery_does_not_stall_reads(runs: list[Run]) -> None:
    fake = on("4.6.0")
    run = Run(fake)
    runs.append(run)
    run.cycle()
    release = threading.Event()
    entered = threading.Event()
    real_entities = fake.entities

    def hung() -> list:  # type: ignore[type-arg]
        entered.set()
        release.wait(30)
        return real_entities()

    fake.entities = hung  # type: ignore[method-assign]
    discovery = threading.Thread(target=run.backend.discover, daemon=True)
    discovery.start()
    assert entered.wait(10)
    try:
        done = threading.Event()
        reader = threading.Thread(
            target=lambda: (
                run.backend.read(run.sampler._roster.get(gpu_labels(0)["uuid"]).identity, request(run)),
                done.set(),
            ),  # fmt: skip
            daemon=True,
        )
        reader.start()
        assert done.wait(10), "a GPU read waited for the hung discovery call"
    finally:
        release.set()
        discovery.join(10)


def request(run: Run):  # type: ignore[no-untyped-def]
    return run.sampler._plan.request("gpu", 0, run.sampler._memo.asks, everything=True)


def test_auto_falls_back_to_nvml_when_dcgm_answers_no_gpu_value(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = on("4.6.0")
    fake.lost = {0, 1}  # every GPU value blank, though the engine groups them
    use_fake(monkeypatch, fake)
    backend, why = select(Settings(backend="auto"))
    assert isinstance(backend, NvmlBackend)
    assert why == "auto: DCGM not available (DCGM (standalone localhost:5555) answers no GPU value)"
    assert not fake.watches


def test_a_hung_re_enumeration_is_counted_while_gpu_reads_go_on() -> None:
    """The sampler's real clock, a short interval, and re-enumeration due every cycle: the engine's
    entity listing hangs; every GPU is still read each cycle and each cycle it hangs is counted."""
    from gpu_exporter.assemble import bare_sampler

    fake = on("4.6.0")
    specs = enabled_specs(ALL)
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 0.2), specs, 0.2, "test", rediscover_interval=0.01)
    release, entered = threading.Event(), threading.Event()
    real_entities = fake.entities

    def hung() -> list:  # type: ignore[type-arg]
        entered.set()
        release.wait(30)
        return real_entities()

    try:
        sampler.run_cycle()
        fake.entities = hung  # type: ignore[method-assign]
        for _ in range(100):  # re-enumeration is due at once; each cycle lasts at most its interval
            if entered.is_set():
                break
            sampler.run_cycle()
        assert entered.is_set(), "the sampler never re-enumerated"
        parsed = {}
        stalled = None
        for _ in range(50):  # each cycle lasts at most its interval; the count appears within a few
            parsed = samples(sampler.run_cycle().rendered.text.decode())
            stalled = value(parsed, "gpu_exporter_sample_errors_total", kind="discovery_stalled")
            if stalled:
                break
        assert stalled and stalled >= 1
        assert value(parsed, "gpu_power_watts", gpu="0") == 250.5
        assert exact(parsed, "gpu_up", **gpu_labels(1)) == 1
    finally:
        release.set()
        sampler.stop()


def test_explicit_dcgm_keeps_dcgm_when_it_answers_no_gpu_value(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = on("4.6.0")
    fake.lost = {0, 1}
    use_fake(monkeypatch, fake)
    backend, why = select(Settings(backend="dcgm"))
    try:
        assert isinstance(backend, DcgmBackend)
        assert why == "requested (standalone localhost:5555; DCGM (standalone localhost:5555) answers no GPU value)"
    finally:
        backend.close()


def test_profiling_module_not_loaded_is_not_blamed_on_the_gpu(
    runs: list[Run], caplog: pytest.LogCaptureFixture
) -> None:
    fake = on("4.6.0")
    fake.profiling_support = {0: -33, 1: -33}  # DCGM_ST_MODULE_NOT_LOADED
    run = Run(fake)
    runs.append(run)
    with caplog.at_level(logging.INFO):
        run.cycle()
    assert "module_not_loaded" in caplog.text
    assert "does not support DCGM profiling" not in caplog.text


def test_the_reasons_that_page_nobody_are_one_list() -> None:
    """The sampler's warnings, the DCGM health check's statuses and GPUFallenOffBus's exception name
    the same reasons: a GPU down as one of them is information, not a fallen-off-the-bus page."""
    import re

    from gpu_exporter.backends.dcgm.health import DOWN_STATUSES
    from gpu_exporter.sampling.roots import NOT_A_FAULT

    rules = (REPO / "alerts" / "gpu-alerts.rules.yml").read_text()
    found = re.search(r'gpu_exporter_device_down\{reason=~"([^"]+)"\}', rules)
    assert found is not None
    assert set(found.group(1).split("|")) == NOT_A_FAULT == DOWN_STATUSES - {"lost"}
