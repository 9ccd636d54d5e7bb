"""An in-process fake of the DCGM adapter protocol (``gpu_exporter.backends.dcgm.adapter.DcgmAdapter``),
not of pydcgm: it hands the backend DCGM-shaped raw values (type codes, statuses, blank sentinels)
and raises the adapter's typed errors for DCGM's status codes, so the backend's decoding, watches,
profiling, Xid counting and reconnects run as they would on a host engine.

Build one with :func:`from_scenario` (a fake-NVML scenario file translated into DCGM's units, for
parity tests) or by hand with :meth:`FakeDcgm.add_gpu` / :meth:`FakeDcgm.add_mig`. Knobs:
``reachable`` (which connection targets answer), :meth:`lose_connection` / :meth:`restore`,
``profiling_support`` and ``profiling_watch_error``, :meth:`record_xid`, ``stale`` group names,
:meth:`stage_incident`, ``health_stall`` and ``health_error`` (DCGM's health watches, per release),
:meth:`add_nvswitch` (switch fields, ports up or down, port fields), :meth:`set_gpu_links` and
``link_state`` (NVLink port states, read again by every ``link_states()`` call), ``link_status_error``
and ``watch_errors`` (a status call or a group's watch that fails).

Engine rules modelled as the host engine has them, per ``release`` (``3.3.9``, ``4.4.2``, ``4.6.0``...:
the field ids that release's table holds, :mod:`gpu_exporter.backends.dcgm.releases`): a field group
holding one id the release does not know is refused whole with DCGM_ST_BADPARAM; samples carry the
time of the engine's last update (wall clock, µs; ``aged`` entities stop being updated); a GPU lost at
run time (:meth:`lose_gpu`) reads blank values of each field's type with status OK and stays listed
(4.x: dcgmGetGpuStatus says lost and group add refuses it; 3.x: its status stays OK); NVLink port entity
ids in the release's packing (3.x: owner id in bits 16-31); more entities than the group limit in a
latest-values call is DCGM_ST_BADPARAM. Also: ``entity_status`` (a GPU listed but in status
Lost, Unsupported or Detached: group add refuses it and the MIG instances and links on it with
DCGM_ST_GPU_IS_LOST, DCGM_ST_GPU_NOT_SUPPORTED or DCGM_ST_BADPARAM, and its fields read
DCGM_ST_GPU_IS_LOST); ``group_limit`` (64 entities per group and per latest-values call on DCGM
3.x, 1024 on 4.x: more is DCGM_ST_MAX_LIMIT); a ``profiling_support`` of
DCGM_ST_MODULE_NOT_LOADED (the engine runs without its profiling module).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from gpu_exporter.backends.dcgm.adapter import DcgmConnectionLost, DcgmError, dcgm_error
from gpu_exporter.backends.dcgm.incidents import SYSTEM_ALL, HealthResponse, Incident, gpu_systems
from gpu_exporter.backends.dcgm.pidvalues import PidUtilization, RunningProcess
from gpu_exporter.backends.dcgm.protocol import GPU_STATUSES
from gpu_exporter.backends.dcgm.releases import known_ids, parse_version
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_LINK,
    FE_SWITCH,
    FP64_BLANK,
    GROUP_MAX_ENTITIES_4,
    INT32_BLANK,
    INT64_BLANK,
    LINK_STATE_DOWN,
    LINK_STATE_UP,
    ST_BADPARAM,
    ST_CONNECTION_NOT_VALID,
    ST_DUPLICATE_KEY,
    ST_GPU_IS_LOST,
    ST_MAX_LIMIT,
    ST_NOT_WATCHED,
    ST_OK,
    ST_VER_MISMATCH,
    Entity,
    FieldValue,
    link_entity_id,
)
from gpu_exporter.backends.nvml.discovery import BRANDS
from gpu_exporter.catalogue import METRICS, NVLINK_ERROR_FIELDS
from tests.dcgmfake_pids import PidEngine, from_keys

NVLINK_FIELDS = dict(NVLINK_ERROR_FIELDS)

#: A raw value as DCGM stores it: (type code, value, status).
Raw = tuple[str, int | float | str | None, int]


def int64(value: int) -> Raw:
    return ("i", int(value), ST_OK)


def double(value: float) -> Raw:
    return ("d", float(value), ST_OK)


def string(value: str) -> Raw:
    return ("s", value, ST_OK)


def failed(status: int) -> Raw:
    """A sample whose read failed with DCGM status ``status`` (its value is meaningless)."""
    return ("i", 0, status)


# Every blank sentinel of dcgmvalue.py, as raw samples.
INT32_SENTINELS = {why: int64(INT32_BLANK + i) for i, why in enumerate(("blank", "not_found", "not_supported", "perm"))}
INT64_SENTINELS = {why: int64(INT64_BLANK + i) for i, why in enumerate(("blank", "not_found", "not_supported", "perm"))}
FP64_SENTINELS = {why: double(FP64_BLANK + i) for i, why in enumerate(("blank", "not_found", "not_supported", "perm"))}
STRING_SENTINELS = {
    "blank": string("<<<NULL>>>"),
    "not_found": string("<<<NOT_FOUND>>>"),
    "not_supported": string("<<<NOT_SUPPORTED>>>"),
    "perm": string("<<<NOT_PERM>>>"),
}
#: What a watched field with no sample yet reads as.
NO_SAMPLE = INT64_SENTINELS["blank"]


@dataclass
class Watch:
    entities: tuple[tuple[int, int], ...]
    fields: tuple[int, ...]
    update_us: int
    keep_age_s: float


@dataclass
class FakeDcgm:
    """The fake host engine and its client connection in one object."""

    source: str = "tests.dcgmfake"
    reachable: set[str | None] = field(default_factory=lambda: {"localhost:5555", None})
    entity_list: list[Entity] = field(default_factory=list)
    values: dict[tuple[int, int], dict[int, Raw]] = field(default_factory=dict)
    globals: dict[int, Raw] = field(default_factory=dict)  # global fields, readable on any GPU
    profiling_support: dict[int, frozenset[int] | int] = field(default_factory=dict)  # GPU id → fields or status
    profiling_watch_error: int | None = None  # status dcgmWatchFields returns for profiling fields
    stale: set[str] = field(default_factory=set)  # group names left by an earlier run
    watches: dict[str, Watch] = field(default_factory=dict)
    xids: list[tuple[int, int, int, int]] = field(default_factory=list)  # (ts µs, group, entity, code)
    link_state: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (group, owner, port) → state
    connected_to: str | None = None
    connected: bool = False
    down: bool = False
    connects: int = 0
    latest_calls: int = 0
    link_status_error: int | None = None  # status dcgmGetNvLinkLinkStatus fails with
    watch_errors: dict[str, int] = field(default_factory=dict)  # group-name suffix → status its watch fails with
    link_state_calls: int = 0
    clock_us: int = 1_700_000_000_000_000
    hang: dict[tuple[int, int], float] = field(default_factory=dict)  # entity → seconds latest_of sleeps
    threads: set[str] = field(default_factory=set)  # names of the threads that called the engine
    entity_status: dict[tuple[int, int], int] = field(default_factory=dict)  # GPU → status group add answers
    group_limit: int = GROUP_MAX_ENTITIES_4
    p2p: dict[int, dict[int, int]] = field(default_factory=dict)  # GPU id → peer GPU id → NVLink P2P status
    release: str = "4.6.0"  # the engine's DCGM release: which field ids it knows, how it packs link ids
    library: str = ""  # the release of the libdcgm the exporter loads (empty: the engine's own)
    aged: dict[tuple[int, int], int] = field(default_factory=dict)  # entity → µs its samples stopped at
    lost: set[int] = field(default_factory=set)  # GPU ids lost at run time (blank values, status OK)
    status_calls: int = 0
    pids: PidEngine = field(default_factory=PidEngine)  # processes, pid watches and jobs (tests/dcgmfake_pids.py)
    #: GPU → its power in mW: field 156 (mJ) then grows by it per second from the engine's start, as the
    #: driver's energy counter does (DCGM reads nvmlDeviceGetTotalEnergyConsumption); the fake NVML's too.
    energy_power: dict[tuple[int, int], int] = field(default_factory=dict)
    started_us: int = field(default_factory=lambda: int(time.time() * 1e6))
    # DCGM's health watches (see :meth:`health_check`)
    health_systems: dict[str, int] = field(default_factory=dict)  # group name → dcgmHealthSystems_t set on it
    health_incidents: list[Incident] = field(default_factory=list)  # staged: what the engine's monitors find
    health_stall: threading.Event | None = None  # while set to an unset event, dcgmHealthCheck waits on it
    health_error: int | None = None  # status dcgmHealthCheck fails with
    health_checks: int = 0
    health_check_started: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.version < (4, 0, 0):
            self.group_limit = 64

    @property
    def version(self) -> tuple[int, int, int]:
        return parse_version(self.release) or (4, 6, 0)

    def mismatched(self) -> bool:
        """DCGM 4.7.1's rule: some requests between a 4.7.1 libdcgm and an earlier host engine, or a 4.7.1
        engine and an earlier libdcgm, fail with DCGM_ST_VER_MISMATCH (dcgm-exporter 4.9.0's release notes;
        DCGM 4.7.1's sources are not readable here, so which requests is modelled as the watches)."""
        library = parse_version(self.library) if self.library else self.version
        sides = sorted((library or self.version, self.version))
        return sides[0] != sides[1] and sides[1] == (4, 7, 1)

    def link_id(self, group: int, owner: int, port: int) -> int:
        return link_entity_id(group, owner, port, legacy=self.version < (4, 0, 0))

    def now_us(self) -> int:
        return max(int(time.time() * 1e6), self.clock_us)

    def lose_gpu(self, gpu_id: int) -> None:
        """GPU ``gpu_id`` falls off the bus: every watched field of it (and of its MIG instances)
        reads its type's blank with status OK; 4.x marks it Lost (group add then refuses it)."""
        self.lost.add(gpu_id)
        if self.version >= (4, 0, 0):
            self.entity_status[(FE_GPU, gpu_id)] = ST_GPU_IS_LOST

    def recover_gpu(self, gpu_id: int) -> None:
        self.lost.discard(gpu_id)
        self.entity_status.pop((FE_GPU, gpu_id), None)

    # building the host ---------------------------------------------------------------------
    def add_gpu(self, gpu_id: int, fields: dict[int, Raw], profiling: frozenset[int] | int = frozenset()) -> None:
        self.entity_list.append(Entity(FE_GPU, gpu_id))
        self.values[(FE_GPU, gpu_id)] = dict(fields)
        self.profiling_support[gpu_id] = profiling

    def add_mig(
        self, gpu_id: int, gi_entity: int, gi: int, ci_entity: int, ci: int, profile: str, fields: dict[int, Raw]
    ) -> None:
        """One MIG device: a GPU instance (named by its profile, as DCGM does) with one compute instance."""
        if not any(e.key == (FE_GPU_I, gi_entity) for e in self.entity_list):
            self.entity_list.append(Entity(FE_GPU_I, gi_entity, (FE_GPU, gpu_id), gpu_instance=gi))
            self.values[(FE_GPU_I, gi_entity)] = {50: string(profile)}
        self.entity_list.append(
            Entity(FE_GPU_CI, ci_entity, (FE_GPU_I, gi_entity), gpu_instance=gi, compute_instance=ci)
        )
        self.values[(FE_GPU_CI, ci_entity)] = dict(fields)

    def add_nvswitch(
        self,
        switch_id: int,
        up_ports: Sequence[int],
        fields: dict[int, Raw] | None = None,
        down_ports: Sequence[int] = (),
        port_fields: dict[int, dict[int, Raw]] | None = None,
    ) -> None:
        """An NVSwitch with its own fields and ports (up, or down), each port with its fields."""
        self.entity_list.append(Entity(FE_SWITCH, switch_id))
        self.values[(FE_SWITCH, switch_id)] = dict(fields or {})
        for port in up_ports:
            self.link_state[(FE_SWITCH, switch_id, port)] = LINK_STATE_UP
        for port in down_ports:
            self.link_state[(FE_SWITCH, switch_id, port)] = LINK_STATE_DOWN
        for port, raw in (port_fields or {}).items():
            self.values[(FE_LINK, self.link_id(FE_SWITCH, switch_id, port))] = dict(raw)

    def set_gpu_links(self, gpu_id: int, states: dict[int, int]) -> None:
        """GPU ``gpu_id``'s NVLink ports and their DCGM states (per-link fields are GPU fields)."""
        for port, state in states.items():
            self.link_state[(FE_GPU, gpu_id, port)] = state

    def record_xid(self, group: int, entity: int, code: int) -> None:
        self.clock_us = self.now_us() + 1
        self.xids.append((self.clock_us, group, entity, code))

    def lose_connection(self) -> None:
        """The host engine dies: every call fails and reconnecting fails until :meth:`restore`."""
        self.down = True
        self.connected = False
        self.watches.clear()
        self.pids = PidEngine(processes=self.pids.processes)  # a new engine: no watch, no cache, no job

    def restore(self) -> None:
        self.down = False

    # the adapter protocol ------------------------------------------------------------------
    def _check(self) -> None:
        self.threads.add(threading.current_thread().name)
        if self.down or not self.connected:
            raise DcgmConnectionLost(
                ST_CONNECTION_NOT_VALID, "The connection to the host engine is not valid any longer"
            )

    def connect(self, address: str | None, timeout_ms: int) -> None:
        if self.down or address not in self.reachable:
            raise dcgm_error(ST_CONNECTION_NOT_VALID, f"connecting to {address or 'embedded'}: connection refused")
        self.connected, self.connected_to = True, address
        self.watches.clear()
        self.pids.watches.clear()
        self.connects += 1

    def disconnect(self) -> None:
        self.connected = False
        self.watches.clear()
        self.pids.watches.clear()

    def entities(self) -> list[Entity]:
        self._check()
        links = [
            Entity(FE_LINK, self.link_id(group, owner, port), (group, owner), link=port)
            for (group, owner, port) in sorted(self.link_state)
            if self.link_status_error is None  # as the real adapter: no status, no link entities
        ]
        return [*self.entity_list, *links]

    def p2p_status(self) -> dict[int, dict[int, int]]:
        self._check()
        return {gpu: dict(peers) for gpu, peers in self.p2p.items()}

    def link_states(self) -> dict[tuple[int, int, int], int]:
        self._check()
        self.link_state_calls += 1
        if self.link_status_error is not None:
            raise dcgm_error(self.link_status_error, "dcgmGetNvLinkLinkStatus failed")
        return dict(self.link_state)

    def remove_stale(self, prefix: str) -> int:
        self._check()
        gone = {name for name in self.stale if name.startswith(prefix)}
        self.stale -= gone
        return len(gone)

    def refusal(self, key: tuple[int, int]) -> int | None:
        """The status dcgmGroupAddEntity refuses ``key`` with: its GPU's, for a MIG instance or link."""
        gpu = self._gpu_of(key)
        return self.entity_status.get((FE_GPU, gpu)) if gpu is not None else None

    def watch(
        self,
        name: str,
        entities: Sequence[tuple[int, int]],
        field_ids: Sequence[int],
        update_us: int,
        keep_age_s: float,
    ) -> dict[tuple[int, int], int]:
        self._check()
        if self.mismatched():
            sides = f"libdcgm {self.library}, host engine {self.release}"
            raise dcgm_error(ST_VER_MISMATCH, f"dcgmWatchFields: API version mismatch ({sides})")
        if len(entities) > self.group_limit:
            raise dcgm_error(ST_MAX_LIMIT, f"dcgmGroupAddEntity: {name} holds {self.group_limit} entities already")
        refused = {key: status for key in entities if (status := self.refusal(key)) is not None}
        if len(refused) == len(entities):
            return refused  # nothing grouped: no field group, nothing watched
        entities = [key for key in entities if key not in refused]
        if not 0 < len(field_ids) < 128:  # dcgmFieldGroupCreate: numFieldIds >= 128 is a bad parameter
            raise dcgm_error(ST_BADPARAM, f"dcgmFieldGroupCreate: {len(field_ids)} field ids, at most 127")
        unknown = sorted(set(field_ids) - known_ids(self.version))
        if unknown:  # DcgmFieldGroupManager::AddFieldGroup: one unknown id refuses the whole group
            raise dcgm_error(ST_BADPARAM, f"dcgmFieldGroupCreate: DCGM {self.release} does not know field {unknown[0]}")
        if name in self.watches or name in self.stale:
            raise dcgm_error(ST_DUPLICATE_KEY, f"dcgmFieldGroupCreate: field group name {name} already exists")
        if self.profiling_watch_error is not None and any(1001 <= f <= 1099 for f in field_ids):
            raise dcgm_error(self.profiling_watch_error, "dcgmWatchFields: profiling watch refused")
        for suffix, status in self.watch_errors.items():
            if name.endswith(suffix):
                raise dcgm_error(status, f"dcgmWatchFields: {name} refused")
        self.watches[name] = Watch(tuple(entities), tuple(field_ids), update_us, keep_age_s)
        return refused

    def unwatch(self, name: str) -> None:
        self.watches.pop(name, None)
        self.pids.unwatch(name)

    def update_all(self) -> None:
        self._check()

    def _gpu_of(self, key: tuple[int, int]) -> int | None:
        """The GPU id a GPU, MIG instance or GPU link belongs to (None for a switch and its ports)."""
        parents = {e.key: e.parent for e in self.entity_list}
        parents.update({(FE_LINK, self.link_id(g, o, p)): (g, o) for g, o, p in self.link_state})
        while key[0] != FE_GPU and parents.get(key) is not None:
            key = parents[key]  # type: ignore[assignment]
        return key[1] if key[0] == FE_GPU else None

    def _sample(self, key: tuple[int, int], field_id: int) -> FieldValue:
        raw = self.values.get(key, {}).get(field_id)
        if raw is None and key[0] == FE_GPU:
            raw = self.globals.get(field_id)
        field_type, value, status = raw if raw is not None else NO_SAMPLE
        if self._gpu_of(key) in self.lost:  # InsertNvmlErrorValue(NVML_ERROR_GPU_IS_LOST): the type's blank
            blanks: dict[str, int | float | str] = {"i": INT64_BLANK, "d": FP64_BLANK, "s": "<<<NULL>>>"}
            field_type = field_type if field_type in blanks else "i"
            value, status = blanks[field_type], ST_OK
        ts = self.aged.get(key, self.now_us())
        power = self.energy_power.get(key) if field_id == 156 and status == ST_OK else None
        if power is not None and isinstance(value, int) and value < INT64_BLANK:
            value += power * max(ts - self.started_us, 0) // 1_000_000
        return FieldValue(key[0], key[1], field_id, field_type, status, ts, value)

    def latest(self, name: str) -> list[FieldValue]:
        self._check()
        watch = self.watches.get(name)
        if watch is None:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        self.latest_calls += 1
        return [self._sample(entity, field_id) for entity in watch.entities for field_id in watch.fields]

    def latest_of(self, entities: Sequence[tuple[int, int]], field_ids: Sequence[int]) -> list[FieldValue]:
        self._check()
        if len(entities) > self.group_limit:
            raise dcgm_error(ST_BADPARAM, f"dcgmEntitiesGetLatestValues: over {self.group_limit} entities")
        for entity in entities:
            if entity in self.hang:
                time.sleep(self.hang[entity])
        self.latest_calls += 1
        watched = {(e, f) for watch in self.watches.values() for e in watch.entities for f in watch.fields}
        return [
            self._sample(entity, field_id)
            if (entity, field_id) in watched
            else FieldValue(entity[0], entity[1], field_id, "i", ST_NOT_WATCHED, 0, INT64_BLANK)
            for entity in entities
            for field_id in field_ids
        ]

    def since(self, name: str, since_us: int) -> tuple[list[FieldValue], int]:
        self._check()
        watch = self.watches.get(name)
        if watch is None:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        found = [
            FieldValue(group, entity, 230, "i", ST_OK, ts, code)
            for ts, group, entity, code in self.xids
            if ts >= since_us and (group, entity) in watch.entities and 230 in watch.fields
        ]
        return found, (max(v.ts for v in found) + 1 if found else max(since_us, 1))

    def known_fields(self, field_ids: Sequence[int]) -> frozenset[int]:
        self._check()
        return frozenset(field_ids) & known_ids(self.version)

    def gpu_status(self, gpu_id: int) -> str:
        self._check()
        self.status_calls += 1
        status = self.entity_status.get((FE_GPU, gpu_id))
        if self.version < (4, 0, 0):  # no dcgmGetGpuStatus: only whether it is among the supported GPUs
            return "ok" if status is None else "inactive"
        codes = {ST_GPU_IS_LOST: 4, -22: 2, ST_BADPARAM: 7}
        return GPU_STATUSES[codes.get(status, 7)] if status is not None else "ok"

    # health watches ------------------------------------------------------------------------
    def stage_incident(self, gpu_id: int, system: int, result: int, code: int, message: str = "") -> None:
        """What the engine's health module would find on GPU ``gpu_id``: ``system`` (a
        dcgmHealthSystems_t bit, or DCGM_HEALTH_WATCH_ALL for a devastating Xid), ``result`` (WARN 10,
        FAIL 20) and the DCGM_FR_* ``code``. Reported by a check only as the release would (below)."""
        self.health_incidents.append(Incident(system, result, code, message or f"DCGM_FR {code}", FE_GPU, gpu_id))

    def health_set(self, name: str, systems: int, update_us: int, keep_age_s: float) -> None:
        self._check()
        if name not in self.watches:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        self.health_systems[name] = systems & 0xFFFFFFFF  # stored as given: unknown bits are kept, ignored

    def health_get(self, name: str) -> int:
        self._check()
        if name not in self.watches:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        return self.health_systems.get(name, 0)

    def health_wait(self) -> None:
        """A stalling check: wait (outside any lock of the library) until the stall is released."""
        stall = self.health_stall
        if stall is not None:
            stall.wait()

    def health_check(self, name: str) -> HealthResponse:
        self._check()
        watch = self.watches.get(name)
        if watch is None:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        return self.health_answer(name, watch.entities)

    def health_answer(self, name: str, entities: Sequence[tuple[int, int]]) -> HealthResponse:
        """``DcgmHealthWatch::MonitorWatches`` of this release on the group ``name`` of ``entities``: a
        staged incident is reported when its GPU is in the group and its system is both set on the group
        and one the release watches on a GPU (``incidents.GPU_SYSTEMS``: no DRIVER before 4.6; PMU, MCU,
        SM never); DCGM_HEALTH_WATCH_ALL incidents (devastating Xids) from 4.4, whatever is set; at
        most 64 incidents on 3.x, 1024 on 4.x (DCGM_HEALTH_WATCH_MAX_INCIDENTS, _V2)."""
        self.health_checks += 1
        self.health_check_started.set()
        self.health_wait()
        if self.health_error is not None:
            raise dcgm_error(self.health_error, "dcgmHealthCheck failed")
        systems = self.health_systems.get(name, 0) & gpu_systems(self.version)
        members = set(entities)
        found = [
            incident
            for incident in self.health_incidents
            if (incident.group, incident.entity) in members
            and (incident.system & systems if incident.system != SYSTEM_ALL else self.version >= (4, 4, 0))
        ][: self.group_limit]
        return HealthResponse(max((i.result for i in found), default=0), tuple(found))

    def profiling_fields(self, gpu_id: int) -> frozenset[int]:
        self._check()
        support = self.profiling_support.get(gpu_id, frozenset())
        if isinstance(support, int):
            raise dcgm_error(support, "dcgmProfGetSupportedMetricGroups failed")
        return support

    # processes (tests/dcgmfake_pids.py) -------------------------------------------------------
    def watch_processes(self, name: str, gpu_ids: Sequence[int], update_us: int, keep_age_s: float) -> None:
        self._check()
        gpus = tuple(g for g in gpu_ids if self.refusal((FE_GPU, g)) is None)
        if not gpus:
            raise dcgm_error(-35, f"{name}: no GPU the engine would group")
        if name in self.pids.watches or name in self.watches:
            raise dcgm_error(ST_DUPLICATE_KEY, f"dcgmFieldGroupCreate: field group name {name} already exists")
        self.pids.watch(name, gpus, update_us, keep_age_s)

    def process_samples(self, name: str, since_us: int) -> tuple[list[RunningProcess], dict[int, int], int]:
        self._check()
        return self.pids.samples(name, since_us, self.now_us())

    def start_job(self, name: str, job_id: str) -> None:
        self._check()
        self.pids.start_job(name, job_id, self.now_us())

    def job_processes(self, job_id: str) -> list[PidUtilization]:
        self._check()
        return self.pids.job_processes(job_id, self.now_us())

    def remove_job(self, job_id: str) -> None:
        self._check()
        try:
            self.pids.remove_job(job_id)
        except DcgmError as err:
            if err.code != -14:  # as the real adapter: an unknown job is ignored
                raise


# --- fake-NVML scenario → DCGM raw values ------------------------------------------------------

#: Scenario key (after ``gpuN.``) → DCGM field id, for every value both fakes describe.
SCENARIO_FIELDS: dict[str, int] = {
    "utilization.gpu": 203,
    "utilization.memory": 204,
    "utilization.encoder": 206,
    "utilization.decoder": 207,
    "memory.total": 250,
    "memory.free": 251,
    "memory.used": 252,
    "memory.reserved": 253,
    "bar1.total": 90,
    "bar1.used": 92,
    "temperature.gpu": 150,
    "temperature.memory": 140,
    "temperature.margin": 153,
    "temperature.slowdown": 158,
    "temperature.shutdown": 159,
    "temperature.max_operating": 152,
    "temperature.mem_max": 151,
    "fan_speed": 191,
    "power.usage": 155,
    "power.enforced_limit": 164,
    "power.default_limit": 163,
    "energy": 156,
    "clock.sm": 100,
    "clock.memory": 101,
    "max_clock.sm": 113,
    "max_clock.memory": 114,
    "pstate": 190,
    "pcie.link_gen": 237,
    "pcie.max_link_gen": 235,
    "pcie.link_width": 238,
    "pcie.max_link_width": 236,
    "pcie.replay_counter": 202,
    "pcie.tx": 200,
    "pcie.rx": 201,
    "clock_event_reasons": 112,
    "clock.video": 102,
    "max_clock.video": 115,
    "app_clock.sm": 110,
    "app_clock.memory": 111,
    "power.limit": 160,
    "power.min_limit": 161,
    "power.max_limit": 162,
    "persistence_mode": 66,
    "compute_mode": 65,
    "virtualization_mode": 500,
    "violation.power": 240,
    "violation.thermal": 241,
    "violation.sync_boost": 242,
    "violation.board_limit": 243,
    "violation.low_util": 244,
    "violation.reliability": 245,
    "violation.app_clocks": 246,
    "violation.base_clocks": 247,
    "ecc.mode": 300,
    "ecc.volatile.corrected": 310,
    "ecc.volatile.uncorrected": 311,
    "ecc.aggregate.corrected": 312,
    "ecc.aggregate.uncorrected": 313,
    "remapped_rows.correctable": 394,
    "remapped_rows.uncorrectable": 393,
    "remapped_rows.pending": 396,
    "remapped_rows.failure": 395,
    "auto_boost": 120,
    "fabric.clique_id": 173,
    "fabric.health_mask": 174,
    "fabric.health_summary": 175,
    # The GPU's C2C link: DCGM asks NVML's fields 170-172, 231-234 with scopeId 0 (INT64, MB/s).
    "c2c.link_count": 285,
    "c2c.status": 286,
    "c2c.max_bandwidth": 287,
    "c2c.crc_errors": 1400,
    "c2c.replay_errors": 1401,
    "c2c.replay_b2b_errors": 1402,
    "c2c.power_state": 1403,
}
# ECC errors by location: DCGM's SBE field of the volatile and the aggregate counter (DBE: the next id).
SCENARIO_FIELDS.update(
    {
        f"ecc.{counter}.{kind}.{location}": sbe + offset
        for location, volatile, aggregate in (
            ("l1_cache", 314, 324), ("l2_cache", 316, 326), ("device_memory", 318, 328), ("register_file", 320, 330),
            ("texture_memory", 322, 332), ("shared_memory", 334, 338), ("cbu", 336, 340), ("sram", 342, 344),
        )
        for counter, sbe in (("volatile", volatile), ("aggregate", aggregate))
        for kind, offset in (("corrected", 0), ("uncorrected", 1))
    }
)  # fmt: skip
SCENARIO_FIELDS.update({"inforom.checksum": 83, "inforom.valid": 84})  # DCGM: 1 valid, 0 corrupted
SCENARIO_FIELDS["ecc.sram.threshold_exceeded"] = 346  # DCGM: nvmlDeviceGetSramEccErrorStatus's bThresholdExceeded
SCENARIO_FIELDS["memory.unrepairable"] = 1507  # DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG: 0/1
# The row remapper histogram: banks by spare rows left (DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_*).
SCENARIO_FIELDS.update(
    {f"row_remapper.{name}": 385 + i for i, name in enumerate(("max", "high", "partial", "low", "none"))}
)
# NVML's field-only values, as DCGM stores them (its fields 1423-1442, 1501, 1523): power smoothing's
# per-profile fields are preset profile 0's (DCGM reads them with scopeId 0).
SCENARIO_FIELDS.update(
    {
        "slowdown.hw_thermal": 1423, "slowdown.hw_power_brake": 1424, "pcie.correctable_errors": 1501,
        "recovery_action": 1523,
        **{
            f"power_smoothing.{key}": number
            for number, key in (
                (1425, "enabled"), (1426, "privilege_level"), (1427, "immediate_ramp_down"),
                (1428, "applied_ceiling"), (1429, "applied_floor"), (1430, "max_floor_percent"),
                (1431, "min_floor_percent"), (1432, "lifetime_remaining_percent"), (1433, "preset_profiles"),
                (1434, "profile.0.floor_percent"), (1435, "profile.0.ramp_up"), (1436, "profile.0.ramp_down"),
                (1437, "profile.0.hysteresis"), (1438, "active_profile"), (1439, "override.floor_percent"),
                (1440, "override.ramp_up"), (1441, "override.ramp_down"), (1442, "override.hysteresis"),
            )
        },
    }
)  # fmt: skip
#: Fields DCGM stores as doubles (watts, power smoothing's percents and rates); the rest are int64 in
#: DCGM's integer unit.
DOUBLE_FIELDS = frozenset({155, 157, 160, 161, 162, 163, 164, *range(1428, 1433), 1434, 1435, 1436, 1439, 1440, 1441})


def _factor(field_id: int) -> Fraction:
    """NVML raw unit → DCGM raw unit for ``field_id``, from the catalogue's two scales."""
    for spec in METRICS:
        if spec.dcgm is not None and spec.dcgm.field_id == field_id and spec.nvml is not None:
            return spec.nvml.scale / spec.dcgm.scale
    raise KeyError(field_id)


def dcgm_raw(field_id: int, nvml_raw: str) -> Raw:
    """A scenario (NVML-unit) value as DCGM would store it: converted by the catalogue's scales;
    integer fields keep DCGM's whole units (MiB, MHz, °C), truncated as DCGM does."""
    number = Fraction(int(nvml_raw, 0)) if nvml_raw.lower().startswith("0x") else Fraction(nvml_raw)
    value = number * _factor(field_id)
    if field_id in DOUBLE_FIELDS:
        return double(float(value))
    return int64(int(value))


def scenario_keys(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, _, raw = line.partition("=")
            values[key.strip()] = raw.strip()
    return values


def _fabric(own: dict[str, str], fields: dict[int, Raw]) -> None:
    """DCGM's fabric fields as its cache manager stores them from nvmlDeviceGetGpuFabricInfoV: field
    170 is the state (1-3), 4 when completed with an error status; a GPU in no fabric (no state, or
    state 0) has none; the clique and mask default to 0 as the fake NVML's, a summary of 0 is none."""
    state = int(own.get("fabric.state", "0"), 0)
    if not state:
        for number in (173, 174, 175):
            fields.pop(number, None)
        return
    failed = state == 3 and int(own.get("fabric.status", "0"), 0) != 0
    fields[170] = int64(4 if failed else state)
    fields.setdefault(173, int64(0))
    fields.setdefault(174, int64(0))
    if int(own.get("fabric.health_summary", "0"), 0) == 0:
        fields.pop(175, None)


def _vgpu_license(own: dict[str, str], fields: dict[int, Raw]) -> None:
    """DCGM 526 as its cache manager stores it from nvmlDeviceGetGridLicensableFeatures: nothing when the
    call fails, 0 where vGPU licensing is not supported (the fake NVML's default), else 1 or 0 from the
    vGPU feature's state, nothing when no vGPU feature is listed."""
    if "error.nvmlDeviceGetGridLicensableFeatures_v4" in own:
        return
    if int(own.get("vgpu_license.supported", "0"), 0) == 0:
        fields[526] = int64(0)
    elif "vgpu_license.state" in own:
        fields[526] = int64(1 if int(own["vgpu_license.state"], 0) > 0 else 0)


def from_scenario(text: str, profiling: frozenset[int] = frozenset()) -> FakeDcgm:
    """A fake host engine showing the same GPUs as the fake NVML does for scenario ``text``
    (identity defaults as in tests/fakenvml/README.md; free memory derived the same way)."""
    keys = scenario_keys(text)
    fake = FakeDcgm()
    fake.globals = {
        1: string(keys.get("driver_version", "999.99")),
        2: string(keys.get("nvml_version", "13.999.99")),
        5: int64(int(keys.get("cuda_driver_version", "13000"))),
    }
    count = int(keys.get("device_count", "0")) or 1 + max(
        (int(k.split(".", 1)[0][3:]) for k in keys if k.startswith("gpu") and k.split(".", 1)[0][3:].isdigit()),
        default=-1,
    )
    for gpu in range(count):
        own = {k.split(".", 1)[1]: v for k, v in keys.items() if k.startswith(f"gpu{gpu}.")}
        if "memory.free" not in own and "memory.total" in own:
            used, reserved = int(own.get("memory.used", "0")), int(own.get("memory.reserved", "0"))
            own["memory.free"] = str(int(own["memory.total"]) - used - reserved)
        fields: dict[int, Raw] = {
            SCENARIO_FIELDS[key]: dcgm_raw(SCENARIO_FIELDS[key], value)
            for key, value in own.items()
            if key in SCENARIO_FIELDS
        }
        # Fields the fake NVML derives from other keys: instant power reads power.usage, BAR1 free is
        # the difference, the pending ECC mode is the current one unless ecc.pending says otherwise.
        if "power.usage" in own:
            fields[157] = dcgm_raw(157, own["power.usage"])
            fake.energy_power[(FE_GPU, gpu)] = int(own["power.usage"])
        if "bar1.total" in own and "bar1.used" in own:
            fields[93] = dcgm_raw(93, str(int(own["bar1.total"]) - int(own["bar1.used"])))
        if "ecc.mode" in own:
            fields[301] = dcgm_raw(301, own.get("ecc.pending", own["ecc.mode"]))
        _fabric(own, fields)
        _vgpu_license(own, fields)
        fields[50] = string(own.get("name", ""))
        fields[52] = int64(gpu)
        fields[54] = string(own.get("uuid", f"GPU-00000000-0000-0000-0000-{gpu:012d}"))
        fields[55] = int64(int(own.get("minor_number", str(gpu))))
        fields[57] = string(own.get("pci_bus_id", f"00000000:{gpu:02X}:00.0"))
        for key, fid in (
            ("serial", 53),
            ("vbios_version", 85),
            ("inforom.oem", 56),
            ("inforom.ecc", 80),
            ("inforom.power", 81),
            ("inforom.image", 82),
        ):
            if key in own:
                fields[fid] = string(own[key])
        # As DCGM stores them: the brand as its name, the PCI ids as integers (the fake NVML's defaults),
        # the compute capability packed as major << 16 | minor.
        if "brand" in own:
            fields[51] = string(BRANDS.get(int(own["brand"], 0), "Unknown"))
        fields[58] = int64(int(own.get("pci.device_id", "0x233010DE"), 0))
        fields[59] = int64(int(own.get("pci.subsystem_id", "0"), 0))
        if "platform.chassis_serial" in own:  # nvmlDeviceGetPlatformInfo: the serial (up to 15 bytes), 0 defaults
            fields[572] = string(own["platform.chassis_serial"][:15])
            # 571: DCGM prints the ibGuid's first 8 bytes as a little-endian number, 0x%016llx (zeros too)
            fields[571] = string(f"0x{int(own.get('platform.ib_guid', '0'), 0) & (2**64 - 1):016x}")
            for number, key in zip(range(573, 578), ("slot", "tray", "host_id", "peer_type", "module_id"), strict=True):
                fields[number] = int64(int(own.get(f"platform.{key}", "0"), 0) & 0xFF)
        # 94: DCGM's cached nvmlGpmQueryDeviceSupport answer, 0 when NVML says not supported
        fields[94] = int64(int(int(own.get("gpm_supported", "0"), 0) != 0))
        # 74: the system's ccFeature, stored for every GPU (0 where NVML does not report it)
        fields[74] = int64(int(keys.get("conf_compute.cc_feature", "0"), 0))
        if "compute_capability.major" in own and "compute_capability.minor" in own:
            fields[63] = int64(int(own["compute_capability.major"]) << 16 | int(own["compute_capability.minor"]))
        peers = {
            int(k.split(".")[1]): int(v, 0) for k, v in own.items() if k.startswith("p2p.") and k.endswith(".nvlink")
        }
        if peers:  # the pairs the fake NVML answers for (its other pairs are NOT_SUPPORTED, left out)
            fake.p2p[gpu] = peers
        links = sorted({int(k.split(".")[1]) for k in own if k.startswith("nvlink.") and k.endswith(".state")})
        for link in links:
            fake.link_state[(FE_GPU, gpu, link)] = (
                LINK_STATE_UP if own[f"nvlink.{link}.state"] == "1" else LINK_STATE_DOWN
            )
            for kind, scenario_key in (
                ("crc_data", "crc_errors"),
                ("replay", "replay_errors"),
                ("recovery", "recovery_errors"),
                ("crc_flit", "crc_flit_errors"),
            ):
                if f"nvlink.{link}.{scenario_key}" in own:
                    fields[NVLINK_FIELDS[kind][link]] = int64(int(own[f"nvlink.{link}.{scenario_key}"]))
        # 1076-1079: DCGM's cache manager stores GPM's C2C rates (MiB/s) × 2^20 as INT64 bytes/s
        for number, metric in ((1076, "total_tx"), (1077, "data_tx"), (1078, "total_rx"), (1079, "data_rx")):
            if f"gpm.c2c_{metric}_per_sec" in own:
                fields[number] = int64(int(float(own[f"gpm.c2c_{metric}_per_sec"]) * 1024 * 1024))
        ecc = [int(v) for k, v in own.items() if k.startswith("nvlink.") and k.endswith(".ecc_errors")]
        if ecc:  # DCGM 1220: NVML's NVLink data ECC total over the links (field 160)
            fields[1220] = int64(sum(ecc))
        mig_mode = int(own.get("mig.mode", "0"))
        fields[67] = int64(mig_mode)
        fields[69] = int64(7 if mig_mode else 0)  # the fake NVML's nvmlDeviceGetMaxMigDeviceCount in MIG mode
        fake.add_gpu(gpu, fields, profiling)
        fake.pids.processes[gpu] = from_keys(own)
        slots = sorted({int(k.split(".")[1]) for k in own if k.startswith("mig.") and k.split(".")[1].isdigit()})
        for slot in slots if mig_mode else ():
            mig = {k.split(".", 2)[2]: v for k, v in own.items() if k.startswith(f"mig.{slot}.")}
            total, used = int(mig.get("memory.total", "0")), int(mig.get("memory.used", "0"))
            mig_fields = {
                250: dcgm_raw(250, str(total)),
                252: dcgm_raw(252, str(used)),
                251: dcgm_raw(251, str(total - used)),
                54: string(mig.get("uuid", f"MIG-00000000-0000-0000-{gpu:04d}-{slot:012d}")),
            }
            gi, ci = int(mig.get("gpu_instance_id", "0")), int(mig.get("compute_instance_id", "0"))
            fake.add_mig(gpu, 100 * gpu + gi, gi, 100 * gpu + slot, ci, mig.get("profile", ""), mig_fields)
    return fake
