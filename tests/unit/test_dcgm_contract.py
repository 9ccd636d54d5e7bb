"""The adapter contract, checked against the fake (always) and the real pydcgm adapter (wherever
DCGM's bindings import and a host engine answers; skipped elsewhere, with the reason shown by
``pytest -ra``). Set DCGM_CONTRACT_ADDRESS=HOST:PORT to test a standalone nv-hostengine; without
it the real adapter starts an embedded engine.

These are the assumptions the backend and tests/dcgmfake.py make about DCGM; on a DCGM host this
is what shows whether they hold.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.backends.dcgm.adapter import (
    DcgmAdapter,
    DcgmConnectionLost,
    DcgmError,
    DcgmModuleNotLoaded,
    DcgmNoPermission,
    DcgmNotSupported,
    DcgmProfilingInUse,
    DcgmUnavailable,
    PydcgmAdapter,
    load_adapter,
)
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_LINK,
    FE_SWITCH,
    FT_DOUBLE,
    FT_INT64,
    FT_STRING,
    ST_BADPARAM,
    ST_GPU_IS_LOST,
    ST_GPU_NOT_SUPPORTED,
    ST_MAX_LIMIT,
    ST_MODULE_NOT_LOADED,
    ST_PROFILING_NOT_SUPPORTED,
    Blank,
    decode,
)
from tests.dcgmfake import FakeDcgm, double, int64, string
from tests.harness import REPO

PREFIX = "gpu-exporter-contract-"
#: Stub bindings (tests/dcgmstub): run the real adapter's code (imports, ctypes structs, callbacks) in CI.
STUB = str(REPO / "tests" / "dcgmstub")
#: GPU temperature (int), power (double), framebuffer used (int, MiB), UUID (string), Xid (int).
FIELDS = {150: FT_INT64, 155: FT_DOUBLE, 252: FT_INT64, 54: FT_STRING}


def _fake() -> FakeDcgm:
    fake = FakeDcgm()
    fake.add_gpu(0, {150: int64(55), 155: double(250.5), 252: int64(1024), 54: string("GPU-x")}, frozenset({1001}))
    fake.add_gpu(1, {150: int64(40), 54: string("GPU-y")}, ST_PROFILING_NOT_SUPPORTED)
    fake.add_mig(1, 3, 1, 4, 0, "1g.10gb", {252: int64(12)})
    fake.add_nvswitch(0, [0, 3])
    return fake


def _forget_bindings() -> None:
    for name in ("dcgm_structs", "dcgm_agent"):
        sys.modules.pop(name, None)
    while STUB in sys.path:
        sys.path.remove(STUB)


@pytest.fixture(params=["fake", "stub", "real"])
def adapter(request: pytest.FixtureRequest) -> Iterator[tuple[DcgmAdapter, str | None]]:
    address: str | None
    if request.param == "fake":
        connected: DcgmAdapter = _fake()
        address = "localhost:5555"
        connected.connect(address, 5000)
    elif request.param == "stub":
        _forget_bindings()
        request.addfinalizer(_forget_bindings)
        request.getfixturevalue("monkeypatch").setenv("DCGM_PYTHON_PATH", STUB)
        connected = load_adapter()
        assert connected.source == STUB
        address = "localhost:5555"
        connected.connect(address, 5000)
    else:
        _forget_bindings()
        try:
            connected = load_adapter()
        except DcgmUnavailable as err:
            pytest.skip(f"real pydcgm adapter not tested: {err}")
        address = os.environ.get("DCGM_CONTRACT_ADDRESS") or None
        try:
            connected.connect(address, 5000)
        except (DcgmUnavailable, DcgmError) as err:
            pytest.skip(f"pydcgm imported from {connected.source}, but no host engine: {err}")
    try:
        yield connected, address
    finally:
        connected.disconnect()


def gpus(adapter: DcgmAdapter) -> list[int]:
    return [e.id for e in adapter.entities() if e.group == FE_GPU]


def test_entities_are_gpus_and_well_parented(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    entities = dcgm.entities()
    keys = {e.key for e in entities}
    assert gpus(dcgm), "at least one GPU"
    for entity in entities:
        assert entity.group in (FE_GPU, FE_GPU_I, FE_GPU_CI, FE_SWITCH, FE_LINK)
        if entity.group == FE_GPU_I:
            assert entity.parent in keys and entity.parent[0] == FE_GPU and entity.gpu_instance is not None
        if entity.group == FE_GPU_CI:
            assert entity.parent in keys and entity.parent[0] == FE_GPU_I
            assert entity.gpu_instance is not None and entity.compute_instance is not None
        if entity.group == FE_LINK:
            assert entity.parent in keys and entity.link is not None


def test_link_states_name_every_link_entity(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    states = dcgm.link_states()
    links = {(e.parent, e.link) for e in dcgm.entities() if e.group == FE_LINK}
    assert {((group, owner), port) for group, owner, port in states} == links
    assert set(states.values()) <= {1, 2, 3}, "disabled, down or up; unsupported ports are left out"
    assert all(group in (FE_GPU, FE_SWITCH) for group, _, _ in states)


def test_watched_fields_come_back_for_every_gpu_typed_or_blank(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    ids = gpus(dcgm)
    name = f"{PREFIX}latest"
    dcgm.watch(name, [(FE_GPU, gpu) for gpu in ids], sorted(FIELDS), 1_000_000, 5.0)
    try:
        dcgm.update_all()
        values = dcgm.latest(name)
    finally:
        dcgm.unwatch(name)
    seen = {(v.group, v.entity, v.field_id) for v in values}
    assert seen == {(FE_GPU, gpu, field) for gpu in ids for field in FIELDS}, "each field once per GPU"
    for sample in values:
        decoded = decode(sample)
        if isinstance(decoded, Blank):
            continue
        assert sample.field_type == FIELDS[sample.field_id]
        assert isinstance(decoded, str if sample.field_type == FT_STRING else int | float)
        assert sample.ts > 0


def test_names_are_unique_and_stale_groups_removable(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    entities = [(FE_GPU, gpus(dcgm)[0])]
    name = f"{PREFIX}stale"
    dcgm.watch(name, entities, [150], 1_000_000, 5.0)
    with pytest.raises(DcgmError):
        dcgm.watch(name, entities, [150], 1_000_000, 5.0)  # names are unique in the host engine
    dcgm.unwatch(name)
    dcgm.watch(name, entities, [150], 1_000_000, 5.0)  # unwatch freed the name
    dcgm.unwatch(name)


def test_values_since_return_a_next_timestamp(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    name = f"{PREFIX}xid"
    dcgm.watch(name, [(FE_GPU, gpu) for gpu in gpus(dcgm)], [230], 1_000_000, 60.0)
    try:
        values, next_since = dcgm.since(name, 0)
        again, after = dcgm.since(name, next_since)
    finally:
        dcgm.unwatch(name)
    assert next_since >= 0 and after >= next_since
    assert all(v.field_id == 230 for v in (*values, *again))
    assert {(v.ts, v.entity) for v in again}.isdisjoint({(v.ts, v.entity) for v in values}), "nothing read twice"


def test_profiling_support_is_a_set_of_field_ids_or_a_typed_error(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    for gpu in gpus(dcgm):
        try:
            fields = dcgm.profiling_fields(gpu)
        except (DcgmNotSupported, DcgmNoPermission, DcgmProfilingInUse):
            continue
        assert all(isinstance(f, int) and f >= 1001 for f in fields)


def test_unknown_group_and_bad_address_raise_typed_errors(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, address = adapter
    with pytest.raises(DcgmError):
        dcgm.latest(f"{PREFIX}never-watched")
    dcgm.disconnect()
    with pytest.raises(DcgmConnectionLost):
        dcgm.entities()  # after disconnect: typed, and DCGM is not called with a dead handle
    with pytest.raises(DcgmError):
        dcgm.connect("127.0.0.1:1", 1000)  # nothing listens on port 1
    dcgm.connect(address, 5000)
    assert gpus(dcgm)


def test_backend_runs_on_the_real_adapter_over_the_stub_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path with the real adapter (stub bindings underneath): values, MIG and Xids."""
    from gpu_exporter.assemble import bare_sampler
    from gpu_exporter.backends.dcgm import DcgmBackend
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
    from tests.harness import samples, value

    _forget_bindings()
    monkeypatch.setenv("DCGM_PYTHON_PATH", STUB)
    collectors = DEFAULT_COLLECTORS | {"profiling", "nvlink", "nvswitch"}
    specs = enabled_specs(collectors)
    backend = DcgmBackend(load_adapter, specs, 3600.0)
    sampler = bare_sampler(backend, specs, 3600.0, "stub", watch_events=True)
    try:
        first = samples(sampler.run_cycle().rendered.text.decode())
        import dcgm_agent  # the stub engine, as the adapter imported it

        dcgm_agent.ENGINE["xids"].append((1_700_000_000_000_009, 5, 4, 43))  # on GPU 1's compute instance
        second = samples(sampler.run_cycle().rendered.text.decode())
    finally:
        sampler.stop()
        _forget_bindings()
    assert value(first, "gpu_exporter_backend_up") == 1
    assert value(first, "gpu_temperature_celsius", gpu="0", uuid="GPU-x") == 55
    assert value(first, "gpu_power_watts", gpu="0") == 250.5
    assert value(first, "gpu_memory_used_bytes", gpu="0", uuid="GPU-x") == 1024 * 2**20
    assert value(first, "gpu_memory_used_bytes", gpu="1", gpu_instance="1", compute_instance="0") == 12 * 2**20
    assert value(first, "gpu_xid_errors_total", gpu="0", xid="79") == 0  # recorded before start
    assert value(second, "gpu_xid_errors_total", gpu="1", xid="43") == 1
    # The stub's NVSwitch 0 has ports 0 and 3 up (dcgmGetNvLinkLinkStatus through the real ctypes structs).
    assert value(first, "gpu_nvswitch_nvlink_up", nvswitch="0", nvlink="3") == 1
    assert "gpu_nvswitch_last_sxid" not in first  # the stub engine holds no SXid


def test_dcgm3_bindings_connect_with_connect_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bindings without dcgmConnect_v3 (DCGM 3.x to 4.4): the adapter connects with dcgmConnect_v2 and
    a plain HOST:PORT, and a refused address is a typed error."""
    _forget_bindings()
    monkeypatch.setenv("DCGM_PYTHON_PATH", STUB)
    try:
        dcgm = load_adapter()
        import dcgm_agent  # the stub, as the adapter imported it

        monkeypatch.delattr(dcgm_agent, "dcgmConnect_v3")
        dcgm.connect("localhost:5555", 5000)
        assert gpus(dcgm)
        dcgm.disconnect()
        with pytest.raises(DcgmError):
            dcgm.connect("localhost:5556", 1000)
    finally:
        _forget_bindings()


# --- host engine rules the fake and the stub model (a real engine cannot be made to break them) ---


class Rules:
    """Sets one engine rule on the fake or on the stub engine underneath the real adapter."""

    def __init__(self, dcgm: DcgmAdapter) -> None:
        if isinstance(dcgm, FakeDcgm):
            self.fake: FakeDcgm | None = dcgm
        elif dcgm.source == STUB:
            import dcgm_agent  # the stub, as the adapter imported it

            self.fake, self.engine = None, dcgm_agent.ENGINE
        else:
            pytest.skip("a real host engine's GPUs cannot be made lost, or its group limit lowered, by a test")

    def status(self, gpu: int, how: str) -> None:
        if self.fake is not None:
            self.fake.entity_status[(FE_GPU, gpu)] = REFUSALS[how]
        else:
            self.engine["status"][gpu] = how

    def limit(self, entities: int) -> None:
        if self.fake is not None:
            self.fake.group_limit = entities
        else:
            self.engine["max_entities"] = entities

    def profiling(self, gpu: int, status: int) -> None:
        if self.fake is not None:
            self.fake.profiling_support[gpu] = status
        else:
            self.engine["prof_status"][gpu] = status

    def release(self, release: str) -> None:
        if self.fake is not None:
            self.fake.release = release
        else:
            self.engine["release"] = release

    def lose(self, gpu: int) -> None:
        if self.fake is not None:
            self.fake.lose_gpu(gpu)
        else:
            self.engine["lost"].add(gpu)

    def age(self, key: tuple[int, int], ts_us: int) -> None:
        if self.fake is not None:
            self.fake.aged[key] = ts_us
        else:
            self.engine["aged"][key] = ts_us


REFUSALS = {"lost": ST_GPU_IS_LOST, "unsupported": ST_GPU_NOT_SUPPORTED, "detached": ST_BADPARAM}


def test_group_limit_is_the_engines(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    assert dcgm.group_limit in (64, 1024)  # DCGM 3.x, 4.x
    keys = [e.key for e in dcgm.entities() if e.group in (FE_GPU, FE_GPU_I, FE_GPU_CI, FE_SWITCH, FE_LINK)]
    if len(keys) > dcgm.group_limit:  # a big host: the engine's own refusal
        with pytest.raises(DcgmError) as raised:
            dcgm.watch(f"{PREFIX}big", keys, [150], 1_000_000, 5.0)
        assert raised.value.code == ST_MAX_LIMIT


@pytest.mark.parametrize("how", sorted(REFUSALS))
def test_a_gpu_the_engine_lists_but_will_not_group_is_refused(
    adapter: tuple[DcgmAdapter, str | None], how: str
) -> None:
    dcgm, _ = adapter
    Rules(dcgm).status(1, how)
    assert 1 in gpus(dcgm), "listed with flags 0"
    name = f"{PREFIX}refused"
    refused = dcgm.watch(name, [(FE_GPU, 0), (FE_GPU, 1), (FE_GPU_CI, 4)], [150], 1_000_000, 5.0)
    try:
        assert refused == {(FE_GPU, 1): REFUSALS[how], (FE_GPU_CI, 4): REFUSALS[how]}  # its MIG instance too
        dcgm.update_all()
        assert {(v.group, v.entity) for v in dcgm.latest(name)} == {(FE_GPU, 0)}
    finally:
        dcgm.unwatch(name)
    assert dcgm.watch(name, [(FE_GPU, 1)], [150], 1_000_000, 5.0) == {(FE_GPU, 1): REFUSALS[how]}
    with pytest.raises(DcgmError):
        dcgm.latest(name)  # nothing could be grouped: nothing is watched under that name
    assert dcgm.watch(name, [(FE_GPU, 0)], [150], 1_000_000, 5.0) == {}  # so the name is free
    dcgm.unwatch(name)


def test_a_full_group_is_the_engines_max_limit(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    Rules(dcgm).limit(2)
    with pytest.raises(DcgmError) as raised:
        dcgm.watch(f"{PREFIX}full", [(FE_GPU, 0), (FE_GPU, 1), (FE_GPU_CI, 4)], [150], 1_000_000, 5.0)
    assert raised.value.code == ST_MAX_LIMIT
    with pytest.raises(DcgmError) as raised:
        dcgm.latest_of([(FE_GPU, 0), (FE_GPU, 1), (FE_GPU_CI, 4)], [150])
    assert raised.value.code == ST_BADPARAM


def test_profiling_module_not_loaded_is_its_own_error(adapter: tuple[DcgmAdapter, str | None]) -> None:
    dcgm, _ = adapter
    Rules(dcgm).profiling(0, ST_MODULE_NOT_LOADED)
    with pytest.raises(DcgmModuleNotLoaded):
        dcgm.profiling_fields(0)


def test_dcgm3_bindings_limit_groups_to_64(monkeypatch: pytest.MonkeyPatch) -> None:
    _forget_bindings()
    monkeypatch.setenv("DCGM_PYTHON_PATH", STUB)
    try:
        assert load_adapter().group_limit == 1024  # 4.x bindings: DCGM_GROUP_MAX_ENTITIES_V2
        import dcgm_agent
        import dcgm_structs  # the stub, as the adapter imported it

        monkeypatch.delattr(dcgm_structs, "DCGM_GROUP_MAX_ENTITIES_V2")
        monkeypatch.setattr(dcgm_structs, "DCGM_GROUP_MAX_ENTITIES", 64, raising=False)
        assert PydcgmAdapter(dcgm_structs, dcgm_agent, STUB).group_limit == 64
    finally:
        _forget_bindings()


@pytest.mark.parametrize("how", ["missing", "broken", "init"])
def test_library_diagnostics_name_the_file_the_folders_and_the_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str
) -> None:
    """The bindings turn every loader failure into DCGM_ST_LIBRARY_NOT_FOUND; the adapter says more."""
    _forget_bindings()
    monkeypatch.setenv("DCGM_PYTHON_PATH", STUB)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    try:
        dcgm = load_adapter()
        import dcgm_agent
        import dcgm_structs

        monkeypatch.setattr(dcgm_structs, "SEARCH_LIBRARY", how != "init")
        if how == "broken":
            (tmp_path / "libdcgm.so.4").write_bytes(b"not an ELF file")
        if how == "init":
            monkeypatch.setattr(dcgm_agent, "dcgmInit", lambda: (_ for _ in ()).throw(dcgm_structs.DCGMError(-7)))
        with pytest.raises(DcgmUnavailable) as raised:
            dcgm.connect("localhost:5555", 1000)
    finally:
        _forget_bindings()
    message = str(raised.value)
    if how == "missing":
        assert raised.value.reason == "library_not_found"
        assert "libdcgm.so.4 (the file these bindings load) is in none of " in message
        assert str(tmp_path) in message and "/usr/lib64" in message and "-linux-gnu" in message
    elif how == "broken":
        assert raised.value.reason == "library_broken"
        assert f"{tmp_path}/libdcgm.so.4 exists but does not load: " in message
        assert "header" in message or "too short" in message  # the dynamic loader's own words
    else:
        assert raised.value.reason == "init_failed" and message.startswith("dcgmInit failed: DCGM error -7")


@pytest.mark.parametrize(("release", "unknown"), [("3.3.9", 94), ("4.4.2", 1523), ("4.6.0", None)])
def test_a_field_group_with_one_unknown_id_is_refused_whole(
    adapter: tuple[DcgmAdapter, str | None], release: str, unknown: int | None
) -> None:
    """DcgmFieldGroupManager::AddFieldGroup: one id the release does not know, DCGM_ST_BADPARAM."""
    dcgm, _ = adapter
    Rules(dcgm).release(release)
    if isinstance(dcgm, PydcgmAdapter):
        dcgm.disconnect()
        dcgm._library_loaded = False  # the release is read when the library is initialised
        dcgm.connect("localhost:5555", 5000)
        assert dcgm.release == release
    name = f"{PREFIX}unknown"
    asked = [150, 155] + ([unknown] if unknown is not None else [1523])
    assert dcgm.known_fields(asked) == frozenset(asked if unknown is None else [150, 155])
    if unknown is None:
        assert dcgm.watch(name, [(FE_GPU, 0)], asked, 1_000_000, 5.0) == {}
        dcgm.unwatch(name)
        return
    with pytest.raises(DcgmError) as raised:
        dcgm.watch(name, [(FE_GPU, 0)], asked, 1_000_000, 5.0)
    assert raised.value.code == ST_BADPARAM and not isinstance(raised.value, DcgmConnectionLost)
    assert dcgm.watch(name, [(FE_GPU, 0)], [150, 155], 1_000_000, 5.0) == {}  # nothing was left behind
    dcgm.unwatch(name)


def test_a_gpu_lost_at_run_time_stays_listed_and_reads_blank_with_status_ok(
    adapter: tuple[DcgmAdapter, str | None],
) -> None:
    dcgm, _ = adapter
    name = f"{PREFIX}lost"
    assert dcgm.watch(name, [(FE_GPU, 0), (FE_GPU, 1)], [150, 54], 1_000_000, 5.0) == {}
    try:
        dcgm.update_all()
        assert dcgm.gpu_status(0) == "ok"
        Rules(dcgm).lose(0)
        assert 0 in gpus(dcgm)  # still listed
        values = {(v.entity, v.field_id): v for v in dcgm.latest_of([(FE_GPU, 0), (FE_GPU, 1)], [150, 54])}
        for field_id in (150, 54):
            lost = values[(0, field_id)]
            assert lost.status == 0 and decode(lost) == Blank("blank")
        assert decode(values[(1, 150)]) == 40
        assert dcgm.gpu_status(0) in ("lost", "ok")  # 4.x may say lost; 3.3 leaves it OK
    finally:
        dcgm.unwatch(name)


def test_samples_carry_the_time_the_engine_updated_them(adapter: tuple[DcgmAdapter, str | None]) -> None:
    import time

    dcgm, _ = adapter
    name = f"{PREFIX}time"
    dcgm.watch(name, [(FE_GPU, 0), (FE_GPU, 1)], [150], 1_000_000, 5.0)
    try:
        dcgm.update_all()
        now_us = time.time() * 1e6
        assert all(abs(v.ts - now_us) < 60e6 for v in dcgm.latest_of([(FE_GPU, 0)], [150]))
        Rules(dcgm).age((FE_GPU, 1), int(now_us - 600e6))  # the engine stopped updating GPU 1
        (old,) = dcgm.latest_of([(FE_GPU, 1)], [150])
        assert now_us - old.ts >= 600e6 - 1
    finally:
        dcgm.unwatch(name)
