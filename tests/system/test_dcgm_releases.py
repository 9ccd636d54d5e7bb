"""The DCGM adapter (``PydcgmAdapter``) on NVIDIA's real, unmodified Python bindings of DCGM 3.3.9,
4.4.2 and 4.6.0, in process, over the stand-in libdcgm (tests/dcgmlib_standin.py: the C library's and
the group managers' rules per release; the engine is tests/dcgmfake.py's FakeDcgm): the adapter's
contract per release, the stand-in's own C-level rules, and NVSwitch ports through the backend.
The real exporter on the same bindings: tests/system/test_dcgm_releases_exporter.py. Skipped, saying why,
where the bindings are not found (tests/dcgmbindings.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

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
from tests.dcgmbindings import RELEASES, bindings, forget
from tests.dcgmfake import FakeDcgm, from_scenario, int64
from tests.dcgmlib_standin import StandInLibrary, install
from tests.harness import SCENARIOS, samples, value

PREFIX = "gpu-exporter-releases-"
#: Temperature (int), power (double), framebuffer used (int, MiB), UUID (string): known to every release.
FIELDS = {150: FT_INT64, 155: FT_DOUBLE, 252: FT_INT64, 54: FT_STRING}
#: A field id the release's engine does not know (the next release added it).
UNKNOWN = {"3.3.9": 94, "4.4.2": 1507, "4.6.0": 1600}
GPUS = 4  # in h100x4.scn


# --- in process: the adapter over the real bindings ------------------------------------------------


class Host:
    """The real adapter, its stand-in library and the engine behind them, for one release."""

    def __init__(self, adapter: PydcgmAdapter, library: StandInLibrary, engine: FakeDcgm, release: str) -> None:
        self.adapter, self.library, self.engine, self.release = adapter, library, engine, release


@pytest.fixture(params=RELEASES)
def host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    release: str = request.param
    folder = bindings(release)
    forget()
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
        forget()


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
    from gpu_exporter.assemble import bare_sampler
    from gpu_exporter.backends.dcgm import DcgmBackend
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, NVSWITCH_PORT_ERRORS, enabled_specs

    kind, field_id = NVSWITCH_PORT_ERRORS[0]
    host.engine.add_nvswitch(0, [0], {863: int64(0)})
    host.engine.add_nvswitch(1, [3], {863: int64(1)}, port_fields={3: {field_id: int64(7)}})
    assert (FE_LINK, _link_id(host.release, 1, 3)) in {e.key for e in host.adapter.entities()}
    specs = enabled_specs(DEFAULT_COLLECTORS | {"nvswitch"})
    sampler = bare_sampler(DcgmBackend(lambda: host.adapter, specs, 3600.0), specs, 3600.0, "releases")
    try:
        parsed = samples(sampler.run_cycle().rendered.text.decode())
    finally:
        sampler.stop()
    assert value(parsed, "gpu_nvswitch_nvlink_errors_total", nvswitch="1", nvlink="3", type=kind) == 7


def test_health_watches_set_read_back_and_checked_as_the_release_answers(host: Host) -> None:
    """dcgmHealthSet_v2/Get/Check through NVIDIA's bindings: the mask set reads back; a staged memory
    FAIL and PCIe WARN come back as incidents in the release's response version (3.x: v4, 4.x: v5);
    a driver incident only from 4.6, whose engine watches the recovery action."""
    from gpu_exporter.backends.dcgm.incidents import RESULT_FAIL, RESULT_WARN, gpu_systems

    name = f"{PREFIX}health"
    assert host.adapter.watch(name, [(FE_GPU, gpu) for gpu in range(GPUS)], [150], 1_000_000, 5.0) == {}
    try:
        mask = gpu_systems(parse_version(host.release) or (0, 0, 0))
        host.adapter.health_set(name, mask, 15_000_000, 600.0)
        assert host.adapter.health_get(name) == mask
        host.engine.stage_incident(1, 0x10, RESULT_FAIL, 4, "volatile DBE")
        host.engine.stage_incident(2, 0x1, RESULT_WARN, 3, "replays")
        host.engine.stage_incident(0, 0x200, RESULT_FAIL, 126, "reboot")
        answer = host.adapter.health_check(name)
    finally:
        host.adapter.unwatch(name)
    got = {(i.entity, i.system, i.result, i.code) for i in answer.incidents}
    want = {(1, 0x10, RESULT_FAIL, 4), (2, 0x1, RESULT_WARN, 3)}
    assert got == (want | {(0, 0x200, RESULT_FAIL, 126)} if host.release >= "4.6" else want)
    assert answer.overall == RESULT_FAIL
    assert "dcgmHealthCheck" in host.library.calls


def test_a_health_response_of_another_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """4.x bindings on a 3.3.9 library: their v5 health response is DCGM_ST_VER_MISMATCH (tsapiEngineHealthCheck)."""
    folder = bindings("4.4.2")
    forget()
    monkeypatch.setenv("DCGM_PYTHON_PATH", str(folder))
    try:
        adapter = load_adapter()
        import dcgm_structs

        engine = from_scenario((SCENARIOS / "h100x4.scn").read_text())
        install(dcgm_structs, engine, (3, 3, 9))
        adapter.connect(None, 5000)
        name = f"{PREFIX}healthv"
        adapter.watch(name, [(FE_GPU, 0)], [150], 1_000_000, 5.0)
        with pytest.raises(DcgmError) as refused:
            adapter.health_check(name)
        assert refused.value.code == -12
        adapter.disconnect()
    finally:
        forget()
