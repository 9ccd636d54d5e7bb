"""The DCGM backend on NVIDIA's real, unmodified Python bindings of DCGM 3.3.9, 4.4.2 and 4.6.0, over the
stand-in libdcgm (tests/dcgmlib_standin.py: the C library's and group managers' rules per release, the
engine being tests/dcgmfake.py's FakeDcgm).

In process: the real adapter (``PydcgmAdapter``) against each release's bindings. Out of process: the
real ``gpu-exporter`` with default flags, its bindings from ``DCGM_PYTHON_PATH``, the stand-in installed
at start (tests/dcgmstandin/sitecustomize.py) over a scenario file, compared with the NVML backend on
the fake NVML and the same scenario; a GPU lost at run time (``gpuN.lost_after`` added to the file).

The bindings are NVIDIA's, not the project's: they are found through ``DCGM_BINDINGS_DIR`` or
``../shared/dcgm-bindings`` beside the repository (one folder per release, ``v4.4.2``), and every test
here is skipped, saying so, where they are not.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_exporter.backends.dcgm.adapter import (
    DcgmError,
    DcgmModuleNotLoaded,
    PydcgmAdapter,
    load_adapter,
)
from gpu_exporter.backends.dcgm.releases import known_ids, parse_version
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_LINK,
    FT_DOUBLE,
    FT_INT64,
    FT_STRING,
    ST_BADPARAM,
    ST_MODULE_NOT_LOADED,
    ST_PROFILING_NOT_SUPPORTED,
)
from gpu_exporter.catalogue import METRICS
from tests.dcgmfake import FakeDcgm, from_scenario, int64
from tests.dcgmlib_standin import StandInLibrary, install
from tests.harness import REPO, SCENARIOS, Exporter, samples, start, value
from tests.test_parity import NVML_ONLY, comparable, whole_mib

RELEASES = ["3.3.9", "4.4.2", "4.6.0"]
BINDINGS = Path(os.environ.get("DCGM_BINDINGS_DIR") or REPO.parent / "shared" / "dcgm-bindings")
#: Every module of a bindings folder (forgotten between releases, so each test imports its own).
MODULES = (
    "dcgm_structs", "dcgm_agent", "dcgm_fields", "dcgmvalue", "dcgm_errors", "dcgm_structs_internal",
    "dcgm_agent_internal", "dcgm_fields_internal", "pydcgm", "DcgmHandle", "DcgmSystem", "DcgmGroup",
    "DcgmFieldGroup", "DcgmReader",
)  # fmt: skip
PREFIX = "gpu-exporter-releases-"
#: Temperature (int), power (double), framebuffer used (int, MiB), UUID (string): known to every release.
FIELDS = {150: FT_INT64, 155: FT_DOUBLE, 252: FT_INT64, 54: FT_STRING}
#: A field id the release's engine does not know (the next release added it).
UNKNOWN = {"3.3.9": 94, "4.4.2": 1507, "4.6.0": 1600}
GPUS = 4  # in h100x4.scn
Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]
STANDIN = REPO / "tests" / "dcgmstandin"


def bindings(release: str) -> Path:
    folder = BINDINGS / f"v{release}"
    if not (folder / "dcgm_agent.py").is_file():
        pytest.skip(
            f"NVIDIA's DCGM {release} bindings not found in {folder}: set DCGM_BINDINGS_DIR to the folder "
            "holding v3.3.9/, v4.4.2/ and v4.6.0/"
        )
    return folder


def _forget() -> None:
    for name in MODULES:
        sys.modules.pop(name, None)
    sys.path[:] = [entry for entry in sys.path if not entry.startswith(str(BINDINGS))]


# --- in process: the adapter over the real bindings ------------------------------------------------


class Host:
    """The real adapter, its stand-in library and the engine behind them, for one release."""

    def __init__(self, adapter: PydcgmAdapter, library: StandInLibrary, engine: FakeDcgm, release: str) -> None:
        self.adapter, self.library, self.engine, self.release = adapter, library, engine, release


@pytest.fixture(params=RELEASES)
def host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    release: str = request.param
    folder = bindings(release)
    _forget()
    monkeypatch.setenv("DCGM_PYTHON_PATH", str(folder))
    try:
        adapter = load_adapter()
        assert adapter.source == str(folder)
        import dcgm_structs  # the release's, as the adapter imported it

        engine = from_scenario((SCENARIOS / "h100x4.scn").read_text())
        engine.release = release
        engine.__post_init__()  # the release's group limit
        library = install(dcgm_structs, engine)
        adapter.connect(None, 5000)
        yield Host(adapter, library, engine, release)
        adapter.disconnect()
    finally:
        _forget()


def gpus(adapter: PydcgmAdapter) -> list[int]:
    return [e.id for e in adapter.entities() if e.group == FE_GPU]


def test_connects_embedded_and_standalone_with_the_releases_call(host: Host) -> None:
    import dcgm_agent

    build = dcgm_agent.dcgmVersionInfo().rawBuildInfoString
    assert parse_version(build.decode() if isinstance(build, bytes) else build) == parse_version(host.release)
    host.adapter.connect("localhost:5555", 5000)
    connect = "dcgmConnect_v3" if host.release >= "4.5" else "dcgmConnect_v2"
    assert host.library.calls.count(connect) == 1, host.library.calls
    assert gpus(host.adapter) == list(range(GPUS))
    with pytest.raises(DcgmError):
        host.adapter.connect("127.0.0.1:1", 1000)  # nothing answers there


def test_entities_links_and_p2p(host: Host) -> None:
    entities = host.adapter.entities()
    assert [e.id for e in entities if e.group == FE_GPU] == list(range(GPUS))
    links = {(e.parent, e.link) for e in entities if e.group == FE_LINK}
    assert links == {((group, owner), port) for group, owner, port in host.adapter.link_states()}
    assert links, "h100x4 has NVLinks"
    p2p = host.adapter.p2p_status()
    if host.release < "4.4":
        assert p2p == {}, "3.x has no dcgmGetNvLinkP2PStatus"
    else:
        assert p2p[0][1] == host.engine.p2p[0][1]


def test_watched_fields_come_back_typed_for_every_gpu(host: Host) -> None:
    name = f"{PREFIX}latest"
    assert host.adapter.watch(name, [(FE_GPU, gpu) for gpu in range(GPUS)], sorted(FIELDS), 1_000_000, 5.0) == {}
    try:
        host.adapter.update_all()
        values = host.adapter.latest(name)
    finally:
        host.adapter.unwatch(name)
    got = {(v.entity, v.field_id): (v.field_type, v.value) for v in values}
    want = {(gpu, f): host.engine.values[(FE_GPU, gpu)][f][:2] for gpu in range(GPUS) for f in FIELDS}
    assert got == want


def test_a_field_group_with_an_id_the_release_does_not_know_is_refused_whole(host: Host) -> None:
    import dcgm_fields

    unknown = UNKNOWN[host.release]
    assert unknown not in known_ids(parse_version(host.release) or (0, 0, 0))
    assert dcgm_fields.DcgmFieldGetById(unknown) is None and dcgm_fields.DcgmFieldGetById(150).fieldId == 150
    with pytest.raises(DcgmError) as raised:
        host.adapter.watch(f"{PREFIX}unknown", [(FE_GPU, 0)], [150, unknown], 1_000_000, 5.0)
    assert raised.value.code == ST_BADPARAM


def test_latest_of_and_its_entity_limit(host: Host) -> None:
    name = f"{PREFIX}of"
    host.adapter.watch(name, [(FE_GPU, 0), (FE_GPU, 1)], [150, 54], 1_000_000, 5.0)
    try:
        values = host.adapter.latest_of([(FE_GPU, 0), (FE_GPU, 1)], [150, 54])
        assert {(v.entity, v.field_id): v.value for v in values} == {
            (gpu, f): host.engine.values[(FE_GPU, gpu)][f][1] for gpu in (0, 1) for f in (150, 54)
        }
        too_many = [(FE_GPU, 0)] * (host.adapter.group_limit + 1)
        with pytest.raises(DcgmError) as raised:
            host.adapter.latest_of(too_many, [150])
        assert raised.value.code == ST_BADPARAM, "the client library's own check: BADPARAM, not MAX_LIMIT"
    finally:
        host.adapter.unwatch(name)


def test_values_since_return_each_xid_once(host: Host) -> None:
    name = f"{PREFIX}xid"
    host.adapter.watch(name, [(FE_GPU, gpu) for gpu in range(GPUS)], [230], 1_000_000, 60.0)
    try:
        host.engine.record_xid(FE_GPU, 2, 79)
        first, next_since = host.adapter.since(name, 0)
        again, after = host.adapter.since(name, next_since)
    finally:
        host.adapter.unwatch(name)
    assert [(v.entity, v.value) for v in first] == [(2, 79)]
    assert again == [] and after >= next_since


def test_profiling_fields_or_typed_errors(host: Host) -> None:
    host.engine.profiling_support.update({0: frozenset({1001, 1002}), 1: ST_PROFILING_NOT_SUPPORTED})
    host.engine.profiling_support[2] = ST_MODULE_NOT_LOADED
    assert host.adapter.profiling_fields(0) == {1001, 1002}
    with pytest.raises(DcgmError) as raised:
        host.adapter.profiling_fields(1)
    assert raised.value.code == ST_PROFILING_NOT_SUPPORTED
    with pytest.raises(DcgmModuleNotLoaded):
        host.adapter.profiling_fields(2)


# --- out of process: the real exporter on each release -------------------------------------------


def _dcgm_env(release: str, scenario: Path) -> dict[str, str]:
    return {
        "DCGM_PYTHON_PATH": str(BINDINGS / f"v{release}"),
        "DCGM_STANDIN_SCENARIO": str(scenario),
        "PYTHONPATH": os.pathsep.join([str(STANDIN), str(REPO)]),
    }


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
            if (BINDINGS / f"v{release}" / "dcgm_agent.py").is_file():
                state.scenarios[release] = path = state.scenario(release)
                state.dcgm[release] = start(None, None, state.root, "--backend", "dcgm", env=_dcgm_env(release, path))
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
    assert set(nvml) - shared <= NVML_ONLY | unknown, sorted(set(nvml) - shared - NVML_ONLY - unknown)
    assert set(dcgm) - shared == set(), sorted(set(dcgm) - shared)
    differ = {
        name: (dcgm[name], nvml[name])
        for name in sorted(shared)
        if dcgm[name] != nvml[name]
        and not (name in partly and dcgm[name].items() <= nvml[name].items())  # a subset, same values
    }
    assert not differ, f"{sorted(differ)} differ; first (DCGM, NVML): {next(iter(differ.items()))}"


@pytest.mark.parametrize("release", RELEASES)
def test_backend_auto_picks_dcgm_and_serves_every_gpu(fakenvml_dir: Path, tmp_path: Path, release: str) -> None:
    """``--backend auto`` where both DCGM (this release) and NVML (the fake) answer."""
    folder = bindings(release)
    scenario = tmp_path / "auto.scn"
    scenario.write_text(whole_mib((SCENARIOS / "h100x4.scn").read_text()))
    env = _dcgm_env(release, scenario)
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


def test_a_newer_library_on_an_older_standalone_engine_serves_every_gpu(run: Run, tmp_path: Path) -> None:
    """4.6.0's bindings and library (they say every id is known) on a 4.4.2 host engine, which refuses
    field groups holding 175, 1507 or 1523: only those go unserved."""
    bindings("4.6.0")
    scenario = tmp_path / "older-engine.scn"
    scenario.write_text(run.text)
    env = {**_dcgm_env("4.6.0", scenario), "DCGM_STANDIN_ENGINE_RELEASE": "4.4.2"}
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


# --- the stand-in keeps the C library's rules (what the real libdcgm of the release answers) --------


def test_the_standin_answers_as_the_releases_library(host: Host) -> None:
    import dcgm_agent
    import dcgm_structs

    handle = host.adapter._handle
    exported = {"dcgmConnect_v3": host.release >= "4.5", "dcgmGetNvLinkP2PStatus": host.release >= "4.4"}
    for function, present in exported.items():
        if present:
            assert dcgm_structs._dcgmGetFunctionPointer(function) is not None
        else:
            with pytest.raises(dcgm_structs.DCGMError) as missing:
                dcgm_structs._dcgmGetFunctionPointer(function)
            assert missing.value.value == dcgm_structs.DCGM_ST_FUNCTION_NOT_FOUND
    # dcgmErrorString is exported by no release: the bindings fall back to the bare code
    assert str(dcgm_structs.DCGMError(-1000)) == "DCGM Error with code -1000"
    # DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP (128) is refused: at most 127 ids in a field group
    ids = sorted(known_ids(parse_version(host.release) or (0, 0, 0)))
    with pytest.raises(dcgm_structs.DCGMError) as refused:
        dcgm_agent.dcgmFieldGroupCreate(handle, ids[:128], f"{PREFIX}128")
    assert refused.value.value == dcgm_structs.DCGM_ST_BADPARAM
    dcgm_agent.dcgmFieldGroupDestroy(handle, dcgm_agent.dcgmFieldGroupCreate(handle, ids[:127], f"{PREFIX}127"))
    # a struct of another version: DCGM_ST_VER_MISMATCH
    status = dcgm_structs.c_dcgmNvLinkStatus_v2()
    status.version = dcgm_structs.dcgmNvLinkStatus_version2
    answer = dcgm_structs._dcgmGetFunctionPointer("dcgmGetNvLinkLinkStatus")(handle, ctypes.byref(status))
    assert answer == dcgm_structs.DCGM_ST_VER_MISMATCH


def _link_id(release: str, owner: int, port: int) -> int:
    """dcgm_link_t's raw id, from the release's dcgm_structs.h: 3.x packs type:8, index:8, id:16; 4.3
    and later type:8, index:16, id:8 (FE_SWITCH = 3)."""
    if release < "4":
        return 3 | port << 8 | owner << 16
    return 3 | port << 8 | owner << 24


def test_nvswitch_ports_are_served_with_the_releases_link_ids(host: Host) -> None:
    """Switch 1's port 3 through the backend: the adapter must name the port as the engine of the
    release does, or the engine refuses it (the issue: 3.x lost every port of a switch other than 0)."""
    from gpu_exporter.backends.dcgm import DcgmBackend
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, NVSWITCH_PORT_ERRORS, enabled_specs
    from gpu_exporter.sampler import Sampler

    kind, field_id = NVSWITCH_PORT_ERRORS[0]
    host.engine.add_nvswitch(0, [0], {863: int64(0)})
    host.engine.add_nvswitch(1, [3], {863: int64(1)}, port_fields={3: {field_id: int64(7)}})
    assert (FE_LINK, _link_id(host.release, 1, 3)) in {e.key for e in host.adapter.entities()}
    specs = enabled_specs(DEFAULT_COLLECTORS | {"nvswitch"})
    sampler = Sampler(DcgmBackend(lambda: host.adapter, specs, 3600.0), specs, 3600.0, "releases")
    try:
        parsed = samples(sampler.run_cycle().rendered.text.decode())
    finally:
        sampler.stop()
    assert value(parsed, "gpu_nvswitch_nvlink_errors_total", nvswitch="1", nvlink="3", type=kind) == 7


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
            if (BINDINGS / f"v{release}" / "dcgm_agent.py").is_file():
                scenarios[release] = path = root / f"{release}.scn"
                path.write_text(state.text + f"dcgm.gpu2.refused = {how}\n")
                env = _dcgm_env(release, path)
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
