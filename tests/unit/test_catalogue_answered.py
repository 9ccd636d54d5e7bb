"""A metric cannot land untested: every catalogue row's NVML source is answered by both NVML doubles,
the C fake (``tests/fakenvml``, loaded in this process with ctypes) and the simulator
(``gpu_exporter.simulate``), or is listed in :data:`KNOWINGLY_ABSENT` with the reason.

"Answered" is proven by asking, not by reading names: the NVML backend itself (its readers, its field
batch, its sample buffers, its GPM, PRM and process readers) reads every row with an NVML source from
each double, over ``tests/scenarios/every_source.scn``, which stages a key for every source, and each
(row, entity kind) it reads (GPU, MIG instance, NVLink, process) must come back with a value. Each row
is read along every path a driver may take it:

- ``fields``: a current driver; values NVML offers as fields come with the one
  ``nvmlDeviceGetFieldValues``, utilisation, clocks and the power peak from the sample buffers, the rest
  from their own calls;
- ``calls``: a driver that knows none of those field ids and keeps no sample buffers; every row with a
  call of its own is read by that call (field-only values and the buffers' reductions have none);
- ``old driver``: as ``calls``, on a driver that lacks the newer symbol a reader prefers (before R510
  no ``nvmlDeviceGetMemoryInfo_v2``, before R535 no ``…ClocksEventReasons``), so its fallback is read;
- ``field id``: each field id the backend would batch (``fields.field_of``) asked on its own, so that
  the call cannot hide a field the double does not answer (the backend falls back to the call).

Both doubles run in this process (:mod:`tests.unit.nvml_doubles`, which says what loading the C fake
leaves behind).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pynvml
import pytest

from gpu_exporter.backends.base import Request
from gpu_exporter.backends.nvml import NvmlBackend, readers
from gpu_exporter.backends.nvml import fields as nvml_fields
from gpu_exporter.backends.nvml.fields import field_of
from gpu_exporter.backends.nvml.samples import CALL as SAMPLES_CALL
from gpu_exporter.catalogue import METRICS, MetricSpec, NvmlSource
from gpu_exporter.catalogue.spec import gauge
from tests.harness import REPO
from tests.unit.nvml_doubles import DOUBLES, Load, nvml_double

SCENARIO = REPO / "tests" / "scenarios" / "every_source.scn"
FIELD_CALL = "nvmlDeviceGetFieldValues"
#: The entity kinds the NVML backend reads rows of (pods and jobs are joined on later, from attribution).
READ_KINDS = ("gpu", "mig", "nvlink", "process")
#: The GPU of the scenario that has every device and NVLink key (gpu1 is the MIG one).
FULL_GPU = 0
#: Every ``samples.unsupported`` name (SCENARIO.md): a driver that keeps no sample buffer at all.
SAMPLE_TYPES = "total_power,gpu_utilization,memory_utilization,enc_utilization,dec_utilization,processor_clk,memory_clk"
#: Catalogue calls whose reader falls back to an older symbol, and the newer symbol it tries first.
NEWER_SYMBOLS = {
    "nvmlDeviceGetMemoryInfo": "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksEventReasons",
}
#: (row key, entity kind, path) a double knowingly leaves without a value, as the real driver does,
#: with the reason. Every entry must really be unanswered (a stale entry fails).
KNOWINGLY_ABSENT: dict[tuple[str, str, str], str] = {
    ("gpu_memory_reserved_bytes", "gpu", "old driver"): "nvmlMemory_t (v1, drivers before R510) has no reserved "
    "member: its used includes the reserved memory, which is absent rather than 0",
}
PATHS = ("fields", "calls", "old driver", "field id")

Unanswered = dict[tuple[str, str, str], str]  # (row key, entity kind, path) → what the double said


@pytest.fixture(params=DOUBLES)
def double(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Load]]:
    """(name, load) of each NVML double in turn."""
    with nvml_double(request.param, request, monkeypatch) as load:
        yield request.param, load


def _nvml_rows(rows: Sequence[MetricSpec]) -> tuple[MetricSpec, ...]:
    return tuple(row for row in rows if row.nvml is not None)


def _kinds(row: MetricSpec) -> list[str]:
    return [kind for kind in row.entities if kind in READ_KINDS]


def _calls_only(rows: Sequence[MetricSpec]) -> str:
    """Scenario lines for a driver without any of the rows' field ids and without sample buffers."""
    ids = set()
    for row in _nvml_rows(rows):
        for link in (None, *range(readers.MAX_LINKS)):
            found = field_of(row.nvml, link)  # type: ignore[arg-type]
            if found is not None:
                ids.add(found[0])
    unknown = ",".join(str(field_id) for field_id in sorted(ids))
    lines = f"fields.unknown = {unknown}\nsamples.unsupported = {SAMPLE_TYPES}\n"
    return "".join(f"gpu{gpu}.{line}\n" for gpu in (0, 1) for line in lines.splitlines())


def _old_driver() -> str:
    """Scenario lines for a driver without :data:`NEWER_SYMBOLS`' newer symbols."""
    return "".join(
        f"gpu{gpu}.error.{symbol} = FUNCTION_NOT_FOUND\n" for gpu in (0, 1) for symbol in NEWER_SYMBOLS.values()
    )


def _read_every_row(load: Load, scenario: Path, rows: Sequence[MetricSpec], path: str) -> Unanswered:
    """Open the NVML backend on the double, read every row twice (GPM metrics need two samples) and
    return the (row, kind) pairs of ``rows`` that got no value, with what the backend was told."""
    load(scenario)
    backend = NvmlBackend()
    _host, devices = backend.open(watch_events=False)
    got: set[tuple[str, str]] = set()
    said: dict[tuple[str, str], str] = {}
    try:
        for cycle in (0, 1):
            for device in devices:
                reading = backend.read(device, Request(cycle, tuple(rows)))
                got.update((key, entity.kind) for entity, values in reading.raw.items() for key in values)
                said.update(((key, entity.kind), what) for entity, key, what in reading.unsupported)
                if reading.errors:  # a call failed rather than answering: say which kinds of failure
                    failed = ", ".join(f"{kind} x{count}" for kind, count in sorted(reading.errors.items()))
                    said.update(
                        ((row.key, kind), f"no value; failed calls on GPU {device.index}: {failed}")
                        for row in rows
                        for kind in _kinds(row)
                        if (row.key, kind) not in said
                    )
    finally:
        backend.close()
    return {
        (row.key, kind, path): said.get((row.key, kind), "no value and no answer")
        for row in rows
        for kind in _kinds(row)
        if (row.key, kind) not in got
    }


def _ask_every_field(load: Load, scenario: Path, rows: Sequence[MetricSpec]) -> Unanswered:
    """Each field id the backend would batch for a row of the full GPU (NVLink 0 for per-link rows),
    asked on its own; the pairs whose entry is not SUCCESS, with NVML's word for the answer."""
    load(scenario)
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(FULL_GPU)
        out: Unanswered = {}
        for row in _nvml_rows(rows):
            for kind, link in (("gpu", None), ("nvlink", 0)):
                field = field_of(row.nvml, link) if kind in row.entities else None  # type: ignore[arg-type]
                if field is None:
                    continue
                entry = pynvml.nvmlDeviceGetFieldValues(handle, [field])[0]
                if entry.nvmlReturn != pynvml.NVML_SUCCESS:
                    out[(row.key, kind, "field id")] = f"field {field[0]} (scopeId {field[1]}): " + str(
                        pynvml.NVMLError(entry.nvmlReturn)
                    )
        return out
    finally:
        pynvml.nvmlShutdown()


def unanswered(load: Load, rows: Sequence[MetricSpec], tmp_path: Path) -> Unanswered:
    """Every (row key, entity kind, path) of ``rows`` the double leaves without a value."""
    rows = _nvml_rows(rows)
    out = _read_every_row(load, SCENARIO, rows, "fields")
    calls = tmp_path / "calls-only.scn"
    calls.write_text(SCENARIO.read_text() + _calls_only(rows))
    called = [row for row in rows if row.nvml is not None and row.nvml.call not in (FIELD_CALL, SAMPLES_CALL)]
    out |= _read_every_row(load, calls, called, "calls")
    old = tmp_path / "old-driver.scn"
    old.write_text(calls.read_text() + _old_driver())
    fallen_back = [row for row in called if row.nvml is not None and row.nvml.call in NEWER_SYMBOLS]
    out |= _read_every_row(load, old, fallen_back, "old driver")
    out |= _ask_every_field(load, SCENARIO, rows)
    return out


def assert_answered(name: str, load: Load, rows: Sequence[MetricSpec], tmp_path: Path) -> None:
    """Fails, naming each (row, kind, path), where ``name`` answers a row neither with a value nor as
    :data:`KNOWINGLY_ABSENT` says."""
    missing = unanswered(load, rows, tmp_path)
    surprises = {what: why for what, why in missing.items() if what not in KNOWINGLY_ABSENT}
    lines = "\n".join(f"  {key} on {kind} ({path}): {why}" for (key, kind, path), why in sorted(surprises.items()))
    assert not surprises, (
        f"catalogue rows the {name} does not answer; stage their key in {SCENARIO.relative_to(REPO)}, make the "
        f"double answer them as nvml.h describes, or list them in KNOWINGLY_ABSENT with the reason:\n{lines}"
    )
    keys = {row.key for row in rows}
    stale = sorted(entry for entry in KNOWINGLY_ABSENT if entry[0] in keys and entry not in missing)
    assert not stale, f"KNOWINGLY_ABSENT entries the {name} answers after all (remove them): {stale}"


def test_every_catalogue_nvml_source_is_answered_by_both_doubles(double: tuple[str, Load], tmp_path: Path) -> None:
    name, load = double
    assert_answered(name, load, METRICS, tmp_path)


def test_knowingly_absent_entries_name_real_rows_and_give_a_reason() -> None:
    kinds = {(row.key, kind) for row in _nvml_rows(METRICS) for kind in _kinds(row)}
    for (key, kind, path), reason in KNOWINGLY_ABSENT.items():
        assert (key, kind) in kinds and path in PATHS and len(reason) > 20, (key, kind)


# A row planted with a source no double answers: a call of nvml.h neither exports ...
PLANTED_CALL = gauge(
    "gpu_planted_power_source", "", "Planted: the power source.", "power", NvmlSource("nvmlDeviceGetPowerSource"), None
)
# ... and a field id of nvml.h neither answers (174, PCIe NAKs received).
PLANTED_FIELD = gauge(
    "gpu_planted_naks_received", "", "Planted: PCIe NAKs.", "pcie", NvmlSource(FIELD_CALL, "planted_naks"), None
)


def test_a_planted_row_no_double_answers_fails_by_name(
    double: tuple[str, Load], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, load = double
    monkeypatch.setitem(
        readers.STRUCT_READERS, "nvmlDeviceGetPowerSource", lambda h: {"": pynvml.nvmlDeviceGetPowerSource(h)}
    )
    naks = pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED
    monkeypatch.setitem(readers.FIELD_ONLY, "planted_naks", naks)
    monkeypatch.setitem(nvml_fields.DEVICE_FIELDS, (FIELD_CALL, "planted_naks"), naks)
    answered = [row for row in METRICS if row.collector == "power"][:1]  # a real row beside them still passes
    with pytest.raises(AssertionError) as failed:
        assert_answered(name, load, [*answered, PLANTED_CALL, PLANTED_FIELD], tmp_path)
    message = str(failed.value)
    assert "gpu_planted_power_source on gpu (fields): nvmlDeviceGetPowerSource is unavailable" in message
    assert "gpu_planted_power_source on gpu (calls)" in message
    assert "gpu_planted_naks_received on gpu (fields)" in message
    assert "gpu_planted_naks_received on gpu (field id): field " + str(naks) in message
    assert answered[0].key not in message
