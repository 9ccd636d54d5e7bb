"""The DCGM backend: catalogue metrics, MIG instances, profiling and Xid counts through a
:class:`~gpu_exporter.backends.dcgm.adapter.DcgmAdapter`.

Connection: ``--dcgm.address HOST:PORT`` connects to that standalone nv-hostengine only. Without
it the backend tries the local standalone engine (``localhost:5555``) first, then starts an
embedded engine in this process. The mode that connected first is kept for every reconnect, so a
restarting host engine is waited for rather than replaced by a second engine competing for the
profiling lock.

Watches: one field group per need, each named ``gpu-exporter-<pid>-<nonce>-<need>`` (groups with
the ``gpu-exporter-`` prefix left by earlier runs are destroyed at each connect): ``identity``
(names, UUIDs, indices; read at discovery), ``gpu`` (every enabled non-profiling catalogue field,
on every GPU), ``mig`` (the per-instance fields, on every MIG compute instance), ``prof<N>`` (the
enabled profiling fields, one group per distinct set of fields a GPU supports, so a mixed node
watches each model's own set) and ``xid`` (field 230 on GPUs and MIG instances). Fields are
sampled by DCGM at the collect interval and kept for a few intervals; each cycle reads the
latest values of each group once (one ``dcgmGetLatestValues_v2`` per group, all entities) and
serves every GPU's read from that.

Failures: blank sentinels and "no data yet" are absent samples; "not supported" is absent and
logged once per (device, field); other statuses are counted by kind. When the profiling module
is locked by another profiler or lacks permission, profiling values are absent, every read of an
affected GPU counts ``profiling_in_use`` (or ``profiling_no_permission``) in
``gpu_exporter_sample_errors_total``, one log line says how to fix it, the watch is retried every
minute, and everything else keeps working. A lost connection makes reads raise
:class:`DeviceLost` and :meth:`DcgmBackend.discover` raise :class:`BackendUnavailable`, so the
sampler closes the backend and reopens it with backoff.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpu_exporter.backends.base import (
    BackendUnavailable,
    DeviceIdentity,
    DeviceLost,
    DeviceReading,
    HostIdentity,
    SwitchReading,
    XidTally,
    tally,
)
from gpu_exporter.backends.dcgm.adapter import (
    DcgmAdapter,
    DcgmConnectionLost,
    DcgmError,
    DcgmNoPermission,
    DcgmNotSupported,
    DcgmProfilingInUse,
    DcgmUnavailable,
)
from gpu_exporter.backends.dcgm.topology import Topology, build, layout, text
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_LINK,
    FE_SWITCH,
    FI_FIRST_PROFILING,
    FI_XID_ERRORS,
    IDENTITY_FIELDS,
    LINK_STATE_UP,
    MAX_FIELDS_PER_GROUP,
    ST_GPU_IS_LOST,
    ST_IN_USE,
    ST_NO_PERMISSION,
    ST_NOT_SUPPORTED,
    ST_PROFILING_LIBRARY_ERROR,
    ST_REQUIRES_ROOT,
    Blank,
    Entity,
    FieldValue,
    decode,
    link_entity_id,
)
from gpu_exporter.backends.dcgm.xids import XidCounter
from gpu_exporter.catalogue import NVSWITCH_IDENTITY_FIELDS, MetricSpec, scaled
from gpu_exporter.sanity import drop_inconsistent, store

log = logging.getLogger(__name__)

#: Prefix of every group this exporter creates in DCGM (stale ones are destroyed at connect).
GROUP_PREFIX = "gpu-exporter-"
#: The local standalone host engine tried first when no --dcgm.address is given.
DEFAULT_STANDALONE = "localhost:5555"
CONNECT_TIMEOUT_MS = 2000
#: How often a profiling watch that failed (lock held, no permission) is tried again.
PROFILING_RETRY_SECONDS = 60.0
#: Identity fields hardly change: sampled once a minute, read at discovery.
_IDENTITY_UPDATE_SECONDS = 60.0
#: Absences that are not errors: no sample yet, or nothing to report.
_QUIET = frozenset({"blank", "not_found", "no_data", "not_watched", "stale_data"})
_UNSUPPORTED = frozenset({"not_supported", "field_unsupported_by_api", "gpu_not_supported"})
_PROFILING_IN_USE_STATUSES = frozenset({ST_PROFILING_LIBRARY_ERROR, ST_IN_USE})
_NO_PERMISSION_STATUSES = frozenset({ST_NO_PERMISSION, ST_REQUIRES_ROOT})
_PROFILING_FIXES = {
    "profiling_in_use": (
        "another profiler holds the GPU profiling lock (Nsight Systems/Compute, CUPTI, or a second DCGM host "
        "engine): run one shared nv-hostengine per node and point every DCGM client at it, or release the lock "
        "while profiling with 'dcgmi profile --pause' / '--resume'"
    ),
    "profiling_no_permission": (
        "the DCGM host engine may not use the profiling counters: run nv-hostengine as root (in a container, "
        "with CAP_SYS_ADMIN); before Hopper, the driver option NVreg_RestrictProfilingToAdminUsers=0 also works"
    ),
    "profiling_failed": "see the DCGM host engine's log (nv-hostengine.log) for why the profiling module failed",
}


class DcgmUnusable(BackendUnavailable):
    """DCGM cannot be used: ``summary`` says why in a few words (for gpu_exporter_backend_info),
    the message adds what to do."""

    def __init__(self, reason: str, summary: str, fix: str) -> None:
        super().__init__(reason, f"{summary}; {fix}")
        self.summary = summary


def _is_profiling(spec: MetricSpec) -> bool:
    return spec.dcgm is not None and spec.dcgm.field_id >= FI_FIRST_PROFILING


def _is_call(spec: MetricSpec) -> bool:
    return spec.dcgm is not None and bool(spec.dcgm.call)


def _fields(specs: Iterable[MetricSpec]) -> list[int]:
    """The field ids of ``specs`` that are plain fields (not per-link lists, not calls), sorted."""
    return sorted({s.dcgm.field_id for s in specs if s.dcgm is not None and not s.dcgm.call and not s.dcgm.links})


def _port_samples(samples: dict[int, FieldValue], specs: Iterable[MetricSpec], port: int) -> dict[int, FieldValue]:
    """Link ``port``'s samples of per-link specs, keyed by each spec's ``field_id`` (link 0's field)."""
    out = {}
    for spec in specs:
        if spec.dcgm is not None and port < len(spec.dcgm.links) and spec.dcgm.links[port] in samples:
            out[spec.dcgm.field_id] = samples[spec.dcgm.links[port]]
    return out


def _pci_bus_id(values: dict[int, int | float | str]) -> str:
    """``00000000:05:00.0`` from the NVSwitch PCI domain, bus, device and function fields (866-869)."""
    parts = [values.get(field_id) for field_id in (866, 867, 868, 869)]
    if not all(isinstance(part, int) for part in parts):
        return ""
    domain, bus, device, function = (int(part) for part in parts)  # type: ignore[arg-type]
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function}"


def _chunks(fields: Sequence[int]) -> list[tuple[int, ...]]:
    return [tuple(fields[i : i + MAX_FIELDS_PER_GROUP]) for i in range(0, len(fields), MAX_FIELDS_PER_GROUP)]


@dataclass
class _Profiling:
    """Per-GPU profiling state: the wanted fields each GPU supports, and the watches that failed."""

    supported: dict[int, frozenset[int]] = field(default_factory=dict)  # DCGM GPU id → fields
    failing: dict[int, str] = field(default_factory=dict)  # DCGM GPU id → error kind
    pending: list[tuple[frozenset[int], tuple[int, ...]]] = field(default_factory=list)  # to watch again
    retry_at: float = 0.0


class DcgmBackend:
    """GPU samples through DCGM. ``read`` may run on several sampler threads at once: one lock
    guards the connection, the topology and the per-cycle cache of latest values."""

    name = "dcgm"

    def __init__(
        self,
        adapter_factory: Callable[[], DcgmAdapter],
        specs: Sequence[MetricSpec],
        interval: float,
        address: str = "",
        clock: Callable[[], float] = time.monotonic,
        switch_specs: Sequence[MetricSpec] = (),
    ) -> None:
        self._factory = adapter_factory
        self._adapter: DcgmAdapter | None = None
        self._specs = tuple(spec for spec in specs if spec.dcgm is not None)
        self._switch_specs = tuple(spec for spec in switch_specs if spec.dcgm is not None)
        #: Link states are read every cycle only when some metric needs them.
        self._wants_links = any(spec.per_link for spec in (*self._specs, *self._switch_specs))
        self._interval = interval
        self._targets: list[str | None] = [address] if address else [DEFAULT_STANDALONE, None]
        self._clock = clock
        self._lock = threading.RLock()
        self._connected = False
        self.mode = ""  # "standalone HOST:PORT" or "embedded", once connected
        self._token = ""
        self._topology = Topology()
        self._watch_events = False
        self._latest_groups: list[str] = []
        self._prof_groups: dict[str, tuple[int, ...]] = {}  # group name → DCGM GPU ids it covers
        self._serial = 0  # numbers profiling groups, whose names must be unique per connection
        self._xid_group = ""
        self._since: int | None = None
        self._link_states: dict[tuple[int, int, int], int] = {}
        self._switch_readings: tuple[float, tuple[SwitchReading, ...]] = (0.0, ())
        self._profiling = _Profiling()
        self._cache: dict[tuple[int, int], dict[int, FieldValue]] | None = None
        self._cache_cycle = -1
        self._skip: set[tuple[str, int]] = set()  # (device uuid, field) unsupported, logged once
        self._logged: set[str] = set()  # one-time log lines already written
        self._xids = XidCounter()

    # connection ------------------------------------------------------------------------------
    def connect(self) -> str:
        """Connect unless connected; returns the mode. Raises :class:`DcgmUnusable`."""
        with self._lock:
            if self._connected:
                return self.mode
            if self._adapter is None:
                try:
                    self._adapter = self._factory()
                except DcgmUnavailable as err:
                    raise self._unusable(err.reason, str(err)) from err
            attempts = []
            for target in self._targets:
                try:
                    self._adapter.connect(target, CONNECT_TIMEOUT_MS)
                except DcgmUnavailable as err:
                    raise self._unusable(err.reason, str(err)) from err
                except DcgmError as err:
                    attempts.append(f"{'embedded' if target is None else target}: {err}")
                    continue
                self.mode = "embedded" if target is None else f"standalone {target}"
                self._targets = [target]  # reconnect the same way
                self._connected = True
                self._token = f"{os.getpid()}-{secrets.token_hex(3)}"
                return self.mode
            raise self._unusable("connect_failed", "; ".join(attempts))

    def probe(self) -> tuple[str, int]:
        """Connect (kept for :meth:`open`) and count the GPUs DCGM sees: (mode, GPUs)."""
        with self._lock:
            mode = self.connect()
            try:
                entities = self._adapter_now().entities()
            except DcgmError as err:
                self._lost(err)
                raise self._unusable(f"dcgm_{err.kind}", f"listing GPUs ({mode}): {err}") from err
            return mode, sum(1 for entity in entities if entity.group == FE_GPU)

    def _unusable(self, reason: str, detail: str) -> DcgmUnusable:
        where = ", ".join("embedded" if t is None else t for t in self._targets)
        fixes = {
            "bindings_not_found": "install DCGM (datacenter-gpu-manager-4-core) or set DCGM_PYTHON_PATH to its "
            "bindings/python3 folder, or run with --backend nvml",
            "bindings_broken": "reinstall DCGM or point DCGM_PYTHON_PATH at bindings matching this Python, or run "
            "with --backend nvml",
            "library_not_found": "install libdcgm of the same DCGM release as the bindings (or add its folder to "
            "LD_LIBRARY_PATH), or run with --backend nvml",
            "connect_failed": f"start nv-hostengine (systemctl start nvidia-dcgm) or correct --dcgm.address (tried "
            f"{where}), or run with --backend nvml",
        }
        return DcgmUnusable(reason, detail, fixes.get(reason, "see the DCGM host engine's log, or use --backend nvml"))

    def _lost(self, err: Exception) -> None:
        """The connection is gone: drop it; the sampler's discover() call turns this into a reopen."""
        if self._connected:
            log.error("DCGM connection lost (%s): %s; reconnecting with backoff", self.mode, err)
        self._connected = False
        self._cache = None
        self._switch_readings = (0.0, ())
        if self._adapter is not None:
            self._adapter.disconnect()

    def _adapter_now(self) -> DcgmAdapter:
        if not self._connected or self._adapter is None:
            raise DcgmConnectionLost(-21, "not connected to DCGM")
        return self._adapter

    # open and discovery ----------------------------------------------------------------------
    def open(self, watch_events: bool) -> tuple[HostIdentity, Sequence[DeviceIdentity]]:
        """Connect, destroy stale groups, discover entities and identities, start the watches."""
        with self._lock:
            self.connect()
            self._watch_events = watch_events
            try:
                adapter = self._adapter_now()
                stale = adapter.remove_stale(GROUP_PREFIX)
                if stale:
                    log.info("destroyed %d stale DCGM group(s) left by earlier gpu-exporter runs", stale)
                self._rebuild(adapter.entities())
            except DcgmConnectionLost as err:
                self._lost(err)
                raise BackendUnavailable("connection_lost", f"DCGM connection lost while starting: {err}") from err
            except DcgmError as err:
                self._lost(err)
                raise BackendUnavailable(f"dcgm_{err.kind}", f"setting up DCGM watches failed: {err}") from err
            topology = self._topology
            log.info(
                "DCGM (%s): %d GPU(s), %d MIG compute instance(s), %d NVSwitch(es), %d NVLink port(s)", self.mode,
                len(topology.gpus), len(topology.migs), len(topology.switches),
                sum(1 for e in topology.entities if e.group == FE_LINK),
            )  # fmt: skip
            return topology.host, topology.devices

    def discover(self) -> Sequence[DeviceIdentity]:
        """Enumerate again; when GPUs or MIG instances changed, rebuild identities and watches.
        Raises BackendUnavailable when the connection is gone."""
        with self._lock:
            try:
                adapter = self._adapter_now()
                entities = adapter.entities()
                if layout(entities) != self._topology.layout:
                    log.info("DCGM entities changed; rebuilding watches")
                    self._rebuild(entities)
            except DcgmError as err:
                self._lost(err)
                raise BackendUnavailable(
                    "connection_lost", f"DCGM ({self.mode or 'not connected'}) stopped answering: {err}"
                ) from err
            return self._topology.devices

    def _rebuild(self, entities: Sequence[Entity]) -> None:
        """Drop our watches, read identities for ``entities``, and watch what the specs need."""
        adapter = self._adapter_now()
        for name in (*self._latest_groups, self._xid_group, self._group("identity")):
            if name:
                adapter.unwatch(name)
        self._latest_groups, self._prof_groups, self._xid_group = [], {}, ""
        self._profiling = _Profiling()
        self._cache = None
        self._topology = self._identify(adapter, entities)
        self._watch(adapter)

    def _group(self, need: str) -> str:
        return f"{GROUP_PREFIX}{self._token}-{need}"

    def _identify(self, adapter: DcgmAdapter, entities: Sequence[Entity]) -> Topology:
        """Watch the identity fields on GPUs and MIG instances, sample them once, and build the
        device identities from them."""
        keys = [e.key for e in entities if e.group in (FE_GPU, FE_GPU_I, FE_GPU_CI)]
        values: dict[tuple[int, int], dict[int, int | float | str]] = {}
        if any(group == FE_GPU for group, _ in keys):
            name = self._group("identity")
            update_us = int(_IDENTITY_UPDATE_SECONDS * 1e6)
            adapter.watch(name, keys, IDENTITY_FIELDS, update_us, 2 * _IDENTITY_UPDATE_SECONDS)
            self._update_all(adapter)
            for sample in adapter.latest(name):
                decoded = decode(sample)
                if not isinstance(decoded, Blank):
                    values.setdefault((sample.group, sample.entity), {})[sample.field_id] = decoded
        return build(entities, values)

    def _update_all(self, adapter: DcgmAdapter) -> None:
        """``dcgmUpdateAllFields``: a first fill of new watches (its failure only delays values)."""
        try:
            adapter.update_all()
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            log.debug("dcgmUpdateAllFields: %s", err)

    # watches ---------------------------------------------------------------------------------
    def _keep_age(self) -> float:
        return max(3 * self._interval, 5.0)

    def _watch(self, adapter: DcgmAdapter) -> None:
        topology = self._topology
        gpus = [(FE_GPU, gpu) for gpu in topology.gpus.values()]
        computes = [(FE_GPU_CI, compute) for compute in topology.migs.values()]
        if not gpus:
            return
        update_us = int(self._interval * 1e6)
        plain = _fields(s for s in self._specs if not _is_profiling(s))
        mig = _fields(s for s in self._specs if s.mig and not _is_profiling(s))
        # Per-link fields: one id per link, watched for the ports the GPUs have.
        linked = [(FE_GPU, gpu) for gpu in topology.gpus.values() if topology.ports(FE_GPU, gpu)]
        ports = {port for gpu in topology.gpus.values() for port in topology.port_numbers(FE_GPU, gpu)}
        per_link = sorted(
            {
                s.dcgm.links[port]
                for s in self._specs
                if s.dcgm is not None
                for port in ports
                if port < len(s.dcgm.links)
            }
        )
        switches = [(FE_SWITCH, switch) for switch in topology.switches]
        switch_fields = (
            sorted({*_fields(s for s in self._switch_specs if not s.per_link), *NVSWITCH_IDENTITY_FIELDS})
            if self._switch_specs
            else []
        )
        switch_ports = [e.key for switch in topology.switches for e in topology.ports(FE_SWITCH, switch)]
        port_fields = _fields(s for s in self._switch_specs if s.per_link)
        for need, entities, fields in (("gpu", gpus, plain), ("mig", computes, mig)):
            for number, chunk in enumerate(_chunks(fields)):
                if entities:
                    name = self._group(f"{need}{number}")
                    adapter.watch(name, entities, chunk, update_us, self._keep_age())
                    self._latest_groups.append(name)
        # NVLink and NVSwitch groups are optional: one the engine refuses (e.g. its NVSwitch module failed)
        # costs only its own series, never the GPUs' (a lost connection still propagates).
        for need, entities, fields in (
            ("links", linked, per_link), ("switch", switches, switch_fields), ("ports", switch_ports, port_fields),
        ):  # fmt: skip
            for number, chunk in enumerate(_chunks(fields)):
                if not entities:
                    continue
                name = self._group(f"{need}{number}")
                try:
                    adapter.watch(name, entities, chunk, update_us, self._keep_age())
                except DcgmConnectionLost:
                    raise
                except DcgmError as err:
                    self._once(
                        f"watch {need}", "DCGM refused the %s watch (%s); those series stay absent, the rest is "
                        "unaffected", need, err, level=logging.WARNING,
                    )  # fmt: skip
                    continue
                self._latest_groups.append(name)
        self._watch_profiling(adapter)
        if self._watch_events:
            self._xid_group = self._group("xid")
            owned = [key for key in topology.owner if key[0] in (FE_GPU, FE_GPU_I, FE_GPU_CI)]
            # Kept long enough that no Xid expires between two reads, even when a cycle is late.
            adapter.watch(self._xid_group, owned, (FI_XID_ERRORS,), update_us, max(10 * self._interval, 60.0))
            if self._since is None:
                # Count from now: Xids DCGM kept from before this exporter started are not ours to count.
                _, self._since = adapter.since(self._xid_group, 0)
        self._update_all(adapter)

    def _watch_profiling(self, adapter: DcgmAdapter) -> None:
        """Ask each GPU which profiling fields it supports (per GPU, so per model), group GPUs by
        that set and watch each set on its GPUs and their MIG instances."""
        wanted = frozenset(s.dcgm.field_id for s in self._specs if s.dcgm is not None and _is_profiling(s))
        if not wanted:
            return
        state = self._profiling
        by_fields: dict[frozenset[int], list[int]] = {}
        for uuid, gpu in self._topology.gpus.items():
            try:
                supported = adapter.profiling_fields(gpu) & wanted
            except DcgmConnectionLost:
                raise
            except DcgmNotSupported:
                supported = frozenset()
            except DcgmError as err:
                self._profiling_failed([gpu], err)
                state.pending.append((wanted, (gpu,)))
                continue
            state.supported[gpu] = supported
            model = self._device(uuid).name or uuid
            if not supported:
                self._once(f"prof-none {model}", "%s does not support DCGM profiling metrics; they stay absent", model)
            elif supported != wanted:
                listed = ",".join(map(str, sorted(supported)))
                self._once(f"prof-some {model}", "%s supports profiling fields %s only", model, listed)
            if supported:
                by_fields.setdefault(supported, []).append(gpu)
        state.pending += [(fields, tuple(gpus)) for fields, gpus in by_fields.items()]
        self._retry_profiling(adapter, force=True)

    def _retry_profiling(self, adapter: DcgmAdapter, force: bool = False) -> None:
        state = self._profiling
        if not state.pending or (not force and self._clock() < state.retry_at):
            return
        pending, state.pending = state.pending, []
        for fields, gpus in pending:
            if not state.supported.keys() >= set(gpus):
                # The support query itself failed: ask again first.
                try:
                    for gpu in gpus:
                        state.supported[gpu] = adapter.profiling_fields(gpu) & fields
                except DcgmConnectionLost:
                    raise
                except DcgmError as err:
                    self._profiling_failed(list(gpus), err)
                    state.pending.append((fields, gpus))
                    continue
                fields = frozenset().union(*(state.supported[gpu] for gpu in gpus))
                if not fields:
                    continue
            self._serial += 1
            name = self._group(f"prof{self._serial}")
            entities = [(FE_GPU, gpu) for gpu in gpus] + [
                (FE_GPU_CI, compute) for (uuid, _slot), compute in self._topology.migs.items()
                if self._topology.gpus[uuid] in gpus
            ]  # fmt: skip
            try:
                adapter.watch(name, entities, sorted(fields), int(self._interval * 1e6), self._keep_age())
            except DcgmConnectionLost:
                raise
            except DcgmError as err:
                self._profiling_failed(list(gpus), err)
                state.pending.append((fields, gpus))
                continue
            self._prof_groups[name] = gpus
            self._latest_groups.append(name)
            for gpu in gpus:
                if state.failing.pop(gpu, None) is not None:
                    log.info("DCGM profiling metrics available again on GPU id %d", gpu)
        state.retry_at = self._clock() + PROFILING_RETRY_SECONDS

    def _profiling_failed(self, gpus: Iterable[int], err: DcgmError) -> None:
        if isinstance(err, DcgmProfilingInUse):
            kind = "profiling_in_use"
        elif isinstance(err, DcgmNoPermission):
            kind = "profiling_no_permission"
        else:
            kind = "profiling_failed"
        for gpu in gpus:
            self._profiling.failing[gpu] = kind
        self._once(
            kind, "DCGM profiling metrics unavailable (%s): %s; other metrics are unaffected. Fix: %s",
            kind, err, _PROFILING_FIXES[kind], level=logging.WARNING,
        )  # fmt: skip

    def _once(self, key: str, message: str, *args: object, level: int = logging.INFO) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args)

    def _device(self, uuid: str) -> DeviceIdentity:
        return next((d for d in self._topology.devices if d.uuid == uuid), DeviceIdentity(index=-1, uuid=uuid))

    # reads -----------------------------------------------------------------------------------
    def _latest(self, cycle: int, reading: DeviceReading) -> dict[tuple[int, int], dict[int, FieldValue]]:
        """This cycle's latest values of every watched group, fetched by the first read of the
        cycle and shared by the others (which also refreshes NVLink states, SXid counts and the
        NVSwitch readings). Raises DeviceLost when the connection is gone."""
        with self._lock:
            if self._cache is not None and self._cache_cycle >= cycle:
                return self._cache
            try:
                adapter = self._adapter_now()
                if self._wants_links:
                    self._refresh_links(adapter, reading.errors)
                self._retry_profiling(adapter)
                merged: dict[tuple[int, int], dict[int, FieldValue]] = {}
                for name in list(self._latest_groups):
                    try:
                        samples = adapter.latest(name)
                    except DcgmConnectionLost:
                        raise
                    except DcgmError as err:
                        self._group_failed(adapter, name, err, reading.errors)
                        continue
                    for sample in samples:
                        merged.setdefault((sample.group, sample.entity), {})[sample.field_id] = sample
            except DcgmConnectionLost as err:
                self._lost(err)
                raise DeviceLost(f"DCGM connection lost: {err}") from err
            self._cache, self._cache_cycle = merged, cycle
            if self._switch_specs:
                switches = tuple(self._read_switch(switch, merged, reading) for switch in self._topology.switches)
                self._switch_readings = (self._clock(), switches)
            return merged

    def _refresh_links(self, adapter: DcgmAdapter, errors: dict[str, int]) -> None:
        """Read the NVLink port states (``dcgmGetNvLinkLinkStatus``). When the set of ports differs
        from the one the watches were built for (a port or switch appeared or went away), rebuild
        the watches. A failed status call leaves every state unknown (``…_nvlink_up`` absent)."""
        try:
            states = adapter.link_states()
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            tally(errors, err.kind)
            self._once("link states", "dcgmGetNvLinkLinkStatus failed: %s; NVLink states are absent meanwhile", err)
            self._link_states = {}
            return
        known = {(e.parent[0], e.parent[1], e.link) for e in self._topology.entities if e.group == FE_LINK and e.parent}
        if set(states) != known:
            log.info("DCGM NVLink ports changed (%d now, %d before); rebuilding watches", len(states), len(known))
            self._rebuild(adapter.entities())
        self._link_states = states

    def _read_switch(
        self, switch: int, latest: dict[tuple[int, int], dict[int, FieldValue]], reading: DeviceReading
    ) -> SwitchReading:
        """One NVSwitch's identity, values and ports from this cycle's values."""
        samples = latest.get((FE_SWITCH, switch), {})
        identity: dict[int, int | float | str] = {}
        for field_id in NVSWITCH_IDENTITY_FIELDS:
            decoded = decode(samples[field_id]) if field_id in samples else Blank("blank")
            if not isinstance(decoded, Blank):
                identity[field_id] = decoded
        due = self._switch_specs  # all every cycle (the catalogue keeps their cadence at 1)
        values: dict[str, float] = {}
        self._fill(values, f"nvswitch{switch}", samples, [s for s in due if not s.per_link], reading)
        port_specs = [spec for spec in due if spec.per_link]
        ports = self._topology.port_numbers(FE_SWITCH, switch)
        port_values = {
            port: self._port_values(
                f"nvswitch{switch}/port{port}",
                latest.get((FE_LINK, link_entity_id(FE_SWITCH, switch, port)), {}),
                port_specs,
                (FE_SWITCH, switch, port),
                reading,
            )  # fmt: skip
            for port in ports
        }
        return SwitchReading(
            switch, pci_bus_id=_pci_bus_id(identity), physical_id=text(identity.get(863)), ports=ports,
            values=values, port_values=port_values,
        )  # fmt: skip

    def _port_values(
        self,
        name: str,
        samples: dict[int, FieldValue],
        specs: Sequence[MetricSpec],
        port: tuple[int, int, int],
        reading: DeviceReading,
    ) -> dict[str, float]:
        """One NVLink port's values: its field specs from ``samples`` (keyed by each spec's
        ``field_id``), its link-state specs from the state DCGM last reported (1 up, 0 down or
        disabled; absent when the state is unknown because the status call failed)."""
        values: dict[str, float] = {}
        self._fill(values, name, samples, [spec for spec in specs if not _is_call(spec)], reading)
        state = self._link_states.get(port)
        if state is not None:
            for spec in specs:
                if _is_call(spec):
                    values[spec.key] = 1.0 if state == LINK_STATE_UP else 0.0
        return values

    def _group_failed(self, adapter: DcgmAdapter, name: str, err: DcgmError, errors: dict[str, int]) -> None:
        gpus = self._prof_groups.get(name)
        if gpus is None:
            tally(errors, err.kind)
            log.debug("reading DCGM group %s failed: %s", name, err)
            return
        # A profiling watch that broke after it started (the lock was taken since): watch again later.
        adapter.unwatch(name)
        self._latest_groups.remove(name)
        del self._prof_groups[name]
        self._profiling_failed(gpus, err)
        fields = frozenset().union(*(self._profiling.supported.get(gpu, frozenset()) for gpu in gpus))
        self._profiling.pending.append((fields, gpus))
        self._profiling.retry_at = self._clock() + PROFILING_RETRY_SECONDS

    def read(self, device: DeviceIdentity, specs: Sequence[MetricSpec], cycle: int) -> DeviceReading:
        """Every due spec of one GPU and the per-instance specs of its MIG devices, from this
        cycle's latest values."""
        reading = DeviceReading()
        latest = self._latest(cycle, reading)
        with self._lock:
            topology, profiling = self._topology, self._profiling
        gpu = topology.gpus.get(device.uuid)
        if gpu is None:
            raise DeviceLost(f"{device.uuid} is no longer enumerated by DCGM")
        samples = latest.get((FE_GPU, gpu), {})
        if any(sample.status == ST_GPU_IS_LOST for sample in samples.values()):
            raise DeviceLost(f"{device.uuid}: DCGM reports the GPU lost")
        due = [spec for spec in specs if spec.dcgm is not None and cycle % spec.every == 0]
        failing = profiling.failing.get(gpu)
        if failing is not None and any(_is_profiling(spec) for spec in due):
            tally(reading.errors, failing)
        supported = profiling.supported.get(gpu, frozenset()) if failing is None else frozenset()
        usable = [spec for spec in due if not _is_profiling(spec) or (spec.dcgm and spec.dcgm.field_id in supported)]
        self._fill(reading.values, device.uuid, samples, [spec for spec in usable if not spec.per_link], reading)
        link_specs = [spec for spec in usable if spec.per_link]
        # Ports from the backend's own topology, which follows port changes (the device identity is
        # the one the sampler got at discovery).
        for port in topology.port_numbers(FE_GPU, gpu) if link_specs else ():
            reading.link_values[port] = self._port_values(
                f"{device.uuid}/nvlink{port}", _port_samples(samples, link_specs, port), link_specs,
                (FE_GPU, gpu, port), reading,
            )  # fmt: skip
        mig_specs = [spec for spec in usable if spec.mig]
        for slot, mig in enumerate(device.migs):
            compute = topology.migs.get((device.uuid, slot))
            if compute is None:
                continue
            values: dict[str, float] = {}
            self._fill(
                values, mig.uuid or f"{device.uuid}/{slot}", latest.get((FE_GPU_CI, compute), {}), mig_specs, reading
            )
            reading.mig_values[slot] = values
        return reading

    def _fill(
        self,
        out: dict[str, float],
        uuid: str,
        samples: dict[int, FieldValue],
        specs: Sequence[MetricSpec],
        reading: DeviceReading,
    ) -> None:
        for spec in specs:
            source = spec.dcgm
            assert source is not None  # filtered by read()
            sample = samples.get(source.field_id)
            if sample is None or (uuid, sample.field_id) in self._skip:
                continue
            decoded = decode(sample)
            if isinstance(decoded, Blank):
                self._absent(uuid, spec, sample.field_id, decoded, reading.errors)
                continue
            if isinstance(decoded, str):
                continue
            raw = float(decoded)
            value = (1.0 if int(decoded) & source.bit else 0.0) if source.bit else scaled(raw, source.scale)
            store(out, spec, raw, value, reading.invalid)
        drop_inconsistent(out, reading.invalid)

    def _absent(self, uuid: str, spec: MetricSpec, field_id: int, blank: Blank, errors: dict[str, int]) -> None:
        """Account for a sample of ``field_id`` (the field actually read: a per-link row reads one
        field per link) that has no value."""
        if blank.why in _QUIET:
            return
        if blank.why in _UNSUPPORTED or blank.status == ST_NOT_SUPPORTED:
            with self._lock:
                self._skip.add((uuid, field_id))
            self._once(
                f"unsupported {uuid} {field_id}", "%s: DCGM field %d (%s) is not supported; not read again until "
                "restart", uuid, field_id, spec.name,
            )  # fmt: skip
        elif blank.status in _PROFILING_IN_USE_STATUSES and _is_profiling(spec):
            tally(errors, "profiling_in_use")
        elif blank.status in _NO_PERMISSION_STATUSES or blank.why == "not_permissioned":
            tally(errors, "no_permission")
        else:
            tally(errors, blank.why)

    # NVSwitches and events -------------------------------------------------------------------
    def switches(self) -> tuple[SwitchReading, ...]:
        """The NVSwitches as the latest cycle read them; none once that is older than the freshness
        limit (three intervals), so a stalled engine shows absence rather than old values."""
        read_at, readings = self._switch_readings
        if self._clock() - read_at > 3 * self._interval:
            return ()
        return readings

    def events(self) -> dict[str, XidTally]:
        """Xid counts by GPU uuid, from every value of field 230 DCGM recorded since the last call
        (on the GPU or any of its MIG instances). Never raises: a lost connection only stops
        counting until the backend is reopened."""
        with self._lock:
            if self._xid_group and self._connected and self._adapter is not None and self._since is not None:
                try:
                    samples, self._since = self._adapter.since(self._xid_group, self._since)
                except DcgmConnectionLost as err:
                    self._lost(err)
                    samples = []
                except DcgmError as err:
                    log.debug("reading Xid values: %s", err)
                    samples = []
                self._xids.count(samples, self._topology.owner)
            return self._xids.tallies(self._topology.gpus)

    def close(self) -> None:
        """Disconnect (the engine drops our groups and watches); safe when not connected."""
        with self._lock:
            if self._connected and self._adapter is not None:
                self._adapter.disconnect()
            self._connected = False
            self._cache = None
            self._latest_groups, self._prof_groups, self._xid_group = [], {}, ""
            self._switch_readings = (0.0, ())
