"""The real ``gpu-exporter`` on NVIDIA's real, unmodified DCGM Python bindings of 3.3.9, 4.4.2 and
4.6.0, out of process: its bindings from ``DCGM_PYTHON_PATH``, the stand-in libdcgm installed at start
(tests/dcgmstandin/sitecustomize.py) over a scenario file that the tests change at run time. Default
flags serve every GPU as the NVML backend does on the fake NVML and the same scenario; ``--backend
auto`` picks DCGM; a newer library on an older engine; a GPU lost at run time; values the engine
stopped updating; a GPU refused at start and accepted later. Skipped, saying why, where the bindings
are not found (tests/dcgmbindings.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_exporter.backends.dcgm.releases import known_ids, parse_version
from gpu_exporter.catalogue import METRICS
from tests.dcgmbindings import RELEASES, bindings, present, process_env
from tests.harness import SCENARIOS, Exporter, samples, start, value
from tests.process.test_parity import NVML_ONLY, comparable, whole_mib

GPUS = 4  # in h100x4.scn
Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]


class Run:
    """An exporter per release (default flags) and one on NVML, all on their own copy of one scenario."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.text = whole_mib((SCENARIOS / "h100x4.scn").read_text())
        self.dcgm: dict[str, Exporter] = {}
        self.scenarios: dict[str, Path] = {}
        self.nvml: Exporter | None = None
        self.lost_at: float | None = None
        self.before: dict[str, dict[str, dict[frozenset[tuple[str, str]], float]]] = {}
        self.started = time.monotonic()

    def scenario(self, name: str) -> Path:
        path = self.root / f"{name}.scn"
        path.write_text(self.text)
        return path

    def break_gpus(self) -> float:
        """Once: note every release's exposition with all GPUs up (:attr:`before`), then, in every
        release's scenario (their 30 s run together), lose GPU 1 and stop the engine updating GPU 3's
        values; when that was."""
        if self.lost_at is None:
            for release, exporter in self.dcgm.items():
                self.before[release] = served(exporter, self.started + 12)
            for path in self.scenarios.values():
                path.write_text(self.text + "gpu1.lost_after = 0\ndcgm.gpu3.aged_after = 0\n")
            self.lost_at = time.monotonic()
        return self.lost_at

    def stop(self) -> None:
        for exporter in [*self.dcgm.values(), *([self.nvml] if self.nvml else [])]:
            exporter.stop()


@pytest.fixture(scope="module")
def run(fakenvml_dir: Path, tmp_path_factory: pytest.TempPathFactory, refusals: Refusals) -> Iterator[Run]:
    """Starts the exporters at once (they warm up together), stopped after the module's last test;
    after ``refusals``' exporters, whose wait for the backend's 30 s probe then runs meanwhile."""
    state = Run(tmp_path_factory.mktemp("releases"))
    try:
        nvml_scenario = state.scenario("nvml")
        state.nvml = start(fakenvml_dir, nvml_scenario, state.root, "--backend", "nvml")
        for release in RELEASES:
            if present(release):
                state.scenarios[release] = path = state.scenario(release)
                state.dcgm[release] = start(None, None, state.root, "--backend", "dcgm", env=process_env(release, path))
        yield state
    finally:
        state.stop()


def served(exporter: Exporter, deadline: float) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """The exposition once every GPU of the scenario is up (or whatever there is at ``deadline``, a
    ``time.monotonic()``)."""
    while True:
        parsed = samples(exporter.metrics())
        up = [value(parsed, "gpu_up", gpu=str(gpu)) for gpu in range(GPUS)]
        if all(v == 1 for v in up) or time.monotonic() > deadline:
            return parsed
        time.sleep(0.2)


def why(exporter: Exporter, parsed: dict[str, dict[frozenset[tuple[str, str]], float]]) -> str:
    info = [dict(labels) for labels in parsed.get("gpu_exporter_backend_info", {})]
    errors = [line for line in exporter.log().splitlines() if "level=error" in line or "level=warn" in line]
    return f"backend_info {info}; log:\n" + "\n".join(errors[:8])


@pytest.mark.parametrize("release", RELEASES)
def test_default_flags_serve_every_gpu_as_the_nvml_backend_does(run: Run, release: str) -> None:
    bindings(release)
    exporter = run.dcgm[release]
    parsed = served(exporter, run.started + 12)  # they all started together
    assert value(parsed, "gpu_exporter_backend_up") == 1, why(exporter, parsed)
    for gpu in range(GPUS):
        assert value(parsed, "gpu_up", gpu=str(gpu)) == 1, f"GPU {gpu}: " + why(exporter, parsed)
    assert run.nvml is not None
    nvml = comparable(run.nvml.metrics())
    dcgm = comparable(exporter.metrics())
    if {175, 1507, 1523} - known_ids(parse_version(release) or (0, 0, 0)):  # before 4.6 the health model
        for name in ("gpu_health_status", "gpu_health_action"):  # judges without them (docs/health.md)
            nvml.pop(name, None), dcgm.pop(name, None)
    shared = set(nvml) & set(dcgm)
    # Not served by design: NVML-only metrics, and those whose DCGM fields the release does not know
    # (every field: no series; some, as ECC locations on 3.x: only the series of the known fields).
    known = known_ids(parse_version(release) or (0, 0, 0))
    sources: dict[str, set[int]] = {}  # a metric may have a row per location or link
    for spec in METRICS:
        if spec.dcgm and spec.dcgm.fields:
            sources.setdefault(spec.name, set()).update(spec.dcgm.fields)
    unknown = {name for name, fields in sources.items() if not fields & known}
    partly = {name for name, fields in sources.items() if fields - known} - unknown
    # Profiling (on by default) is GPM's on the NVML side; the stand-in engine under NVIDIA's bindings has no
    # profiling module, so its GPUs serve none (DCGM profiling is proven on the DCGM fake: tests/unit).
    profiling = {spec.name for spec in METRICS if spec.collector == "profiling"}
    assert set(nvml) - shared <= NVML_ONLY | unknown | profiling, sorted(set(nvml) - shared - NVML_ONLY - unknown)
    assert set(dcgm) - shared == set(), sorted(set(dcgm) - shared)
    differ = {
        name: (dcgm[name], nvml[name])
        for name in sorted(shared)
        if dcgm[name] != nvml[name]
        and not (name in partly and dcgm[name].items() <= nvml[name].items())  # a subset, same values
    }
    assert not differ, f"{sorted(differ)} differ; first (DCGM, NVML): {next(iter(differ.items()))}"


@pytest.mark.parametrize("release", RELEASES)
def test_backend_auto_picks_an_embedded_dcgm_and_serves_every_gpu(
    fakenvml_dir: Path, tmp_path: Path, release: str
) -> None:
    """``--backend auto`` where DCGM (this release) and NVML (the fake) answer and no standalone host
    engine runs: the backend starts an embedded engine."""
    folder = bindings(release)
    scenario = tmp_path / "auto.scn"
    scenario.write_text(whole_mib((SCENARIOS / "h100x4.scn").read_text()) + "dcgm.hostengine = none\n")
    trace = tmp_path / "calls.txt"
    env = {**process_env(release, scenario), "DCGM_STANDIN_TRACE": str(trace)}
    assert Path(env["DCGM_PYTHON_PATH"]) == folder
    exporter = start(fakenvml_dir, scenario, tmp_path, "--backend", "auto", env=env)
    try:
        parsed = served(exporter, time.monotonic() + 6)
    finally:
        exporter.stop()
    info = [dict(labels) for labels in parsed.get("gpu_exporter_backend_info", {})]
    assert [entry.get("backend") for entry in info] == ["dcgm"], why(exporter, parsed)
    for gpu in range(GPUS):
        assert value(parsed, "gpu_up", gpu=str(gpu)) == 1, f"GPU {gpu}: " + why(exporter, parsed)
    calls = [line.split()[1:] for line in trace.read_text().splitlines()]
    assert ["dcgmStartEmbedded", "0"] in calls, "embedded, as no standalone engine answered"


def test_a_newer_library_on_an_older_standalone_engine_serves_every_gpu(run: Run, tmp_path: Path) -> None:
    """4.6.0's bindings and library (they say every id is known) on a 4.4.2 host engine, which refuses
    field groups holding 175, 1507 or 1523: only those go unserved."""
    bindings("4.6.0")
    scenario = tmp_path / "older-engine.scn"
    scenario.write_text(run.text)
    env = {**process_env("4.6.0", scenario), "DCGM_STANDIN_ENGINE_RELEASE": "4.4.2"}
    exporter = start(None, None, tmp_path, "--backend", "dcgm", env=env)
    try:
        parsed = served(exporter, time.monotonic() + 8)
    finally:
        exporter.stop()
    assert run.nvml is not None
    nvml = samples(run.nvml.metrics())
    for gpu in range(GPUS):
        assert value(parsed, "gpu_up", gpu=str(gpu)) == 1, f"GPU {gpu}: " + why(exporter, parsed)
        want = value(nvml, "gpu_temperature_celsius", gpu=str(gpu))
        assert value(parsed, "gpu_temperature_celsius", gpu=str(gpu)) == want
    assert "gpu_memory_unrepairable" in nvml and "gpu_memory_unrepairable" not in parsed  # 1507: 4.5 and later


@pytest.mark.parametrize("release", RELEASES)
def test_a_gpu_lost_at_run_time_is_down_lost_within_30_s(run: Run, release: str) -> None:
    bindings(release)
    exporter = run.dcgm[release]
    lost_at = run.break_gpus()  # every release's scenario at once: their 30 s run together
    before = run.before[release]
    if value(before, "gpu_up", gpu="1") != 1:
        pytest.fail("GPU 1 never came up, so its loss cannot be seen: " + why(exporter, before), pytrace=False)
    while True:
        parsed = samples(exporter.metrics())
        down = value(parsed, "gpu_exporter_device_down", gpu="1", reason="lost")
        if value(parsed, "gpu_up", gpu="1") == 0 and down == 1:
            break
        if time.monotonic() - lost_at > 30:
            pytest.fail(
                f"30 s after the loss: gpu_up{{gpu=1}} {value(parsed, 'gpu_up', gpu='1')}, "
                f"device_down{{reason=lost}} {down}, GPU 1 temperature "
                f"{value(parsed, 'gpu_temperature_celsius', gpu='1')}; " + why(exporter, parsed),
                pytrace=False,
            )
        time.sleep(0.5)
    for gpu in (0, 2):  # (GPU 3's values go stale meanwhile: the next test)
        assert value(parsed, "gpu_up", gpu=str(gpu)) == 1
        assert value(parsed, "gpu_temperature_celsius", gpu=str(gpu)) == value(
            before, "gpu_temperature_celsius", gpu=str(gpu)
        )


@pytest.mark.parametrize("release", RELEASES)
def test_values_the_engine_stopped_updating_are_dropped_and_counted(run: Run, release: str) -> None:
    bindings(release)
    exporter = run.dcgm[release]
    broken_at = run.break_gpus()
    before = run.before[release]
    if value(before, "gpu_temperature_celsius", gpu="3") is None:
        pytest.fail("GPU 3 was never served, so its values cannot go stale: " + why(exporter, before), pytrace=False)
    while True:
        parsed = samples(exporter.metrics())
        temperature = value(parsed, "gpu_temperature_celsius", gpu="3")
        stale = value(parsed, "gpu_exporter_sample_errors_total", kind="stale") or 0
        if temperature is None and stale > 0:
            break
        if time.monotonic() - broken_at > 30:
            pytest.fail(
                f"30 s after GPU 3's values stopped: temperature {temperature}, stale errors {stale}; "
                + why(exporter, parsed),
                pytrace=False,
            )
        time.sleep(0.5)
    assert value(parsed, "gpu_up", gpu="3") == 1, "only stale, and the engine says it is fine: not down"
    assert value(parsed, "gpu_temperature_celsius", gpu="0") == value(before, "gpu_temperature_celsius", gpu="0")


#: How each release's engine refuses a GPU at start: 4.x marks a GPU it lost Lost; 3.3.9's cache
#: manager never sets DcgmEntityStatusLost, so a GPU it refuses is one it does not support.
REFUSED_AT_START = {"3.3.9": "unsupported", "4.4.2": "lost", "4.6.0": "lost"}
PLACEHOLDER = {"gpu": "2", "uuid": "GPU-dcgm-2"}


class Refusals:
    """An exporter per release (``--gpu.rediscover-interval 1s``) whose engine refuses GPU 2 at start
    and accepts it once its placeholder is served (the backend asks a refused GPU again 30 s later)."""

    def __init__(self, root: Path, text: str) -> None:
        self.root, self.text = root, text
        self.dcgm: dict[str, Exporter] = {}
        self.before: dict[str, Parsed] = {}
        self.log_size: dict[str, int] = {}
        self.accepted_at = 0.0


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Refusals]:
    root = tmp_path_factory.mktemp("refused")
    state = Refusals(root, whole_mib((SCENARIOS / "h100x4.scn").read_text()))
    scenarios = {}
    try:
        for release, how in REFUSED_AT_START.items():
            if present(release):
                scenarios[release] = path = root / f"{release}.scn"
                path.write_text(state.text + f"dcgm.gpu2.refused = {how}\n")
                env = process_env(release, path)
                flags = ("--backend", "dcgm", "--gpu.rediscover-interval", "1s")
                state.dcgm[release] = start(None, None, root, *flags, env=env)
        deadline = time.monotonic() + 10
        for release, exporter in state.dcgm.items():
            state.before[release] = _wait(exporter, lambda p: value(p, "gpu_up", **PLACEHOLDER) == 0, deadline)
            state.log_size[release] = len(exporter.log())
        for path in scenarios.values():
            path.write_text(state.text)  # accepted from now on
        state.accepted_at = time.monotonic()
        yield state
    finally:
        for exporter in state.dcgm.values():
            exporter.stop()


def _wait(exporter: Exporter, done: Callable[[Parsed], bool], deadline: float) -> Parsed:
    while True:
        parsed = samples(exporter.metrics())
        if done(parsed) or time.monotonic() > deadline:
            return parsed
        time.sleep(0.2)


@pytest.mark.parametrize("release", RELEASES)
def test_a_gpu_refused_at_start_then_accepted_takes_over_its_placeholder(refusals: Refusals, release: str) -> None:
    bindings(release)
    exporter, before, reason = refusals.dcgm[release], refusals.before[release], REFUSED_AT_START[release]
    assert value(before, "gpu_exporter_device_down", **PLACEHOLDER, reason=reason) == 1, why(exporter, before)
    assert value(before, "gpu_up", **PLACEHOLDER) == 0
    assert [value(before, "gpu_up", gpu=str(gpu)) for gpu in (0, 1, 3)] == [1, 1, 1]

    def identified(p: Parsed) -> bool:  # the GPU under its own UUID, and no placeholder series left
        return value(p, "gpu_up", gpu="2") == 1 and not any(("uuid", "GPU-dcgm-2") in k for s in p.values() for k in s)

    parsed = _wait(exporter, identified, refusals.accepted_at + 45)
    assert identified(parsed), f"45 s after GPU 2 was accepted: {parsed.get('gpu_up')}; " + why(exporter, parsed)
    assert value(parsed, "gpu_temperature_celsius", gpu="2") is not None
    after = exporter.log()[refusals.log_size[release] :]
    assert "level=error" not in after, after  # a recovery is no error
