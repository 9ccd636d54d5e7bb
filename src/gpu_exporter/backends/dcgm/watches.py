"""The DCGM watches of one connection: identity, GPU, MIG, NVLink, NVSwitch, profiling and Xid
groups, each named ``gpu-exporter-<pid>-<nonce>-<need>``, and which fields each GPU may be asked for.

Entities the engine lists but will not group (a Lost, Unsupported or Detached GPU, and its MIG
instances and links) are left out of every group; such a GPU stays a device, refused, and is tried
again with backoff (:meth:`Watches.probe_refused`). Every group is split to the engine's group
limit (``adapter.group_limit``: 64 entities on DCGM 3.x, 1024 on 4.x) and to 127 fields
(dcgmFieldGroupCreate refuses 128).

Profiling fields are watched per set of fields a GPU supports (so a mixed node watches each model's
own set). A profiling module the engine has not loaded, like a model without profiling, disables
profiling for those GPUs with one log line. A watch the engine refuses because the profiling lock
is held or permission is missing is retried with backoff (1 minute doubling to 10) while every
other watch keeps working. NVLink and NVSwitch watches are optional: one the engine refuses costs
only its own series.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpu_exporter.backends.dcgm.adapter import (
    DcgmAdapter,
    DcgmConnectionLost,
    DcgmError,
    DcgmModuleNotLoaded,
    DcgmNoPermission,
    DcgmNotSupported,
    DcgmProfilingInUse,
)
from gpu_exporter.backends.dcgm.topology import Topology, build, refusal, refusal_kind, refuse, with_p2p
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_SWITCH,
    FI_FIRST_PROFILING,
    FI_LAST_PROFILING,
    FI_UUID,
    FI_XID_ERRORS,
    IDENTITY_FIELDS,
    MAX_IDS_PER_FIELD_GROUP,
    ST_BADPARAM,
    Blank,
    Entity,
    decode,
)
from gpu_exporter.catalogue import NVSWITCH_IDENTITY_FIELDS, MetricSpec

log = logging.getLogger(__name__)

#: Prefix of every group this exporter creates in DCGM (stale ones are destroyed at connect).
GROUP_PREFIX = "gpu-exporter-"
#: How often a profiling watch that failed (lock held, no permission) is tried again.
PROFILING_RETRY_SECONDS = 60.0
#: Longest wait between two tries of a refused profiling watch.
PROFILING_RETRY_MAX_SECONDS = 600.0
#: How often a GPU the engine refused to group is tried again: first wait, doubling to the longest.
REFUSED_RETRY_SECONDS = 30.0
REFUSED_RETRY_MAX_SECONDS = 300.0
#: Identity fields hardly change: sampled once a minute, read at discovery.
_IDENTITY_UPDATE_SECONDS = 60.0
PROFILING_FIXES = {
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
    "module_not_loaded": "the host engine runs without its profiling module: start nv-hostengine without denying "
    "it (--denylist-modules), or see nv-hostengine.log for why it failed to load",
}


def is_profiling(spec: MetricSpec) -> bool:
    return spec.dcgm is not None and FI_FIRST_PROFILING <= spec.dcgm.field_id <= FI_LAST_PROFILING


def is_call(spec: MetricSpec) -> bool:
    return spec.dcgm is not None and bool(spec.dcgm.call)


def plain_fields(specs: Iterable[MetricSpec]) -> list[int]:
    """The field ids of ``specs`` that are plain fields (not per-link lists, not calls), sorted."""
    return sorted({s.dcgm.field_id for s in specs if s.dcgm is not None and not s.dcgm.call and not s.dcgm.links})


def link_fields(specs: Iterable[MetricSpec], ports: Iterable[int]) -> list[int]:
    """The per-link field ids of ``specs`` for these port numbers, sorted."""
    wanted = set(ports)
    return sorted({s.dcgm.links[p] for s in specs if s.dcgm is not None for p in wanted if p < len(s.dcgm.links)})


def wanted_fields(specs: Iterable[MetricSpec]) -> list[int]:
    """Every field id the backend may ask for ``specs``: their fields (each link's too), the identity
    fields of GPUs, MIG instances and NVSwitches, and the Xid field."""
    wanted = {*IDENTITY_FIELDS, *NVSWITCH_IDENTITY_FIELDS, FI_XID_ERRORS}
    for spec in specs:
        if spec.dcgm is not None and not spec.dcgm.call:
            wanted.add(spec.dcgm.field_id)
            wanted.update(spec.dcgm.links)
    return sorted(wanted)


def _chunks(fields: Sequence[int]) -> list[tuple[int, ...]]:
    return [tuple(fields[i : i + MAX_IDS_PER_FIELD_GROUP]) for i in range(0, len(fields), MAX_IDS_PER_FIELD_GROUP)]


def split(entities: Sequence[tuple[int, int]], limit: int) -> list[list[tuple[int, int]]]:
    """``entities`` in runs of at most ``limit`` (the engine's entity group limit)."""
    return [list(entities[i : i + limit]) for i in range(0, len(entities), max(1, limit))]


@dataclass
class Profiling:
    """Per-GPU profiling state: the wanted fields each GPU supports, and the watches that failed."""

    supported: dict[int, frozenset[int]] = field(default_factory=dict)  # DCGM GPU id → fields
    failing: dict[int, str] = field(default_factory=dict)  # DCGM GPU id → error kind
    pending: list[tuple[frozenset[int], tuple[int, ...]]] = field(default_factory=list)  # to watch again
    retry_at: float = 0.0
    delay: float = PROFILING_RETRY_SECONDS  # the wait after the next failed try


class Watches:
    """Every group of one connection; rebuilt whole when the entities change."""

    def __init__(
        self,
        adapter: DcgmAdapter,
        token: str,
        specs: Sequence[MetricSpec],
        interval: float,
        once: Callable[..., None],
        clock: Callable[[], float] = time.monotonic,
        known: frozenset[int] | None = None,
    ) -> None:
        self._adapter = adapter
        #: Field ids the engine knows (None: all); ids found unknown are added to :attr:`unknown`.
        self.known = known
        self.unknown: set[int] = set()
        self._token = token
        self._specs = specs
        self._interval = interval
        self._once = once
        self._clock = clock
        self._names: list[str] = []
        self._serial = 0  # numbers profiling groups, whose names must be unique per connection
        self.profiling = Profiling()
        self.xid_groups: list[str] = []
        self.topology = Topology()
        self.refused_retry_at = 0.0
        self.refused_delay = REFUSED_RETRY_SECONDS

    def group(self, need: str) -> str:
        return f"{GROUP_PREFIX}{self._token}-{need}"

    def keep_age(self) -> float:
        return max(3 * self._interval, 5.0)

    def drop(self) -> None:
        """Unwatch every group of this connection."""
        for name in (*self._names, *self.xid_groups):
            self._adapter.unwatch(name)
        self._names, self.xid_groups = [], []
        self.profiling = Profiling()

    def known_only(self, fields: Iterable[int]) -> list[int]:
        """``fields`` without the ids the engine does not know, sorted."""
        wanted = set(fields) - self.unknown
        return sorted(wanted if self.known is None else wanted & self.known)

    def _watch(
        self, need: str, entities: Sequence[tuple[int, int]], fields: Sequence[int], update_us: int, keep_age_s: float
    ) -> list[str]:
        """Watch ``fields`` on ``entities`` (refused GPUs left out, ids the engine does not know left
        out), split to the engine's limits: groups ``<need><n>``, ``<need><n>e<k>``... Returns the
        names watched; a GPU the engine refuses here is marked refused."""
        usable = [key for key in entities if not self.topology.blocked(key)]
        names = []
        for number, chunk in enumerate(_chunks(self.known_only(fields))):
            for part, keys in enumerate(split(usable, self._adapter.group_limit)):
                name = self.group(f"{need}{number}" + (f"e{part}" if part else ""))
                refused = self._watch_known(name, keys, chunk, update_us, keep_age_s)
                self._refused(refused)
                if len(refused) < len(keys):
                    names.append(name)
        return names

    def _watch_known(
        self, name: str, keys: Sequence[tuple[int, int]], fields: Sequence[int], update_us: int, keep_age_s: float
    ) -> dict[tuple[int, int], int]:
        """``adapter.watch``; when the engine refuses the field group as a bad parameter (an id its
        release does not know, though its library said otherwise), find the refused ids by halving,
        leave them out for this connection and watch the rest."""
        try:
            return self._adapter.watch(name, keys, fields, update_us, keep_age_s)
        except DcgmError as err:
            if err.code != ST_BADPARAM or isinstance(err, DcgmConnectionLost):
                raise
            refused = self._refused_ids(keys, list(fields))
            if not refused:
                raise
            self.unknown.update(refused)
            rest = [f for f in fields if f not in refused]
            if not rest:
                return {}
            return self._adapter.watch(name, keys, rest, update_us, keep_age_s)

    def _refused_ids(self, keys: Sequence[tuple[int, int]], fields: list[int]) -> list[int]:
        """The ids of ``fields`` the engine refuses in a field group, found by halving (probe groups)."""
        probe = self.group("fieldprobe")
        try:
            self._adapter.watch(probe, keys, fields, 60_000_000, 120.0)
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            if err.code != ST_BADPARAM:
                return []
            if len(fields) == 1:
                return fields
            half = len(fields) // 2
            return self._refused_ids(keys, fields[:half]) + self._refused_ids(keys, fields[half:])
        self._adapter.unwatch(probe)
        return []

    def _refused(self, refused: dict[tuple[int, int], int], previous: Topology | None = None) -> None:
        for (group, number), status in refused.items():
            if group == FE_GPU and number not in self.topology.refused:
                reason = f"{refusal(status)} (dcgmGroupAddEntity: status {status})"
                refuse(self.topology, number, reason, previous)
                self.topology.refused_kind[number] = self._refusal_kind(number, status)
                self._once(
                    f"refused {number}", "DCGM GPU id %d is left out of every group: %s; the other GPUs are "
                    "unaffected and it is tried again with backoff", number, reason, level=logging.WARNING,
                )  # fmt: skip

    def _refusal_kind(self, gpu: int, status: int) -> str:
        """``lost``, ``unsupported``, ``detached``, ``inaccessible`` or ``disabled``: the engine's
        status of the GPU where it can say (4.x), else what the group add answered."""
        try:
            word = self._adapter.gpu_status(gpu)
        except DcgmConnectionLost:
            raise
        except DcgmError:
            word = "unknown"
        if word in ("lost", "unsupported", "detached", "inaccessible", "disabled"):
            return word
        return refusal_kind(status)

    def probe_refused(self) -> bool:
        """When due, ask the engine whether it groups a refused GPU now (one probe group); True when
        it accepts one (the caller rebuilds the watches). Waits 30 s doubling to 5 min between tries."""
        refused = sorted(self.topology.refused)
        if not refused or self._clock() < self.refused_retry_at:
            return False
        name = self.group("probe")
        accepted = False
        for part in split([(FE_GPU, gpu) for gpu in refused], self._adapter.group_limit):
            try:
                answer = self._adapter.watch(name, part, (FI_UUID,), 60_000_000, 120.0)
            except DcgmConnectionLost:
                raise
            except DcgmError as err:  # not an answer about these GPUs: ask again later
                log.debug("probing refused GPUs: %s", err)
                break
            self._adapter.unwatch(name)
            accepted = accepted or len(answer) < len(part)
        if accepted:
            return True
        self.refused_retry_at = self._clock() + self.refused_delay
        self.refused_delay = min(2 * self.refused_delay, REFUSED_RETRY_MAX_SECONDS)
        return False

    def identify(self, entities: Sequence[Entity], previous: Topology | None = None) -> Topology:
        """Watch the identity fields on GPUs and MIG instances, sample them once, and build the
        device identities from them. A GPU the engine refuses to group keeps the identity it had in
        ``previous`` (a GPU lost at runtime), else it gets a placeholder (one lost at start)."""
        keys = [e.key for e in entities if e.group in (FE_GPU, FE_GPU_I, FE_GPU_CI)]
        values: dict[tuple[int, int], dict[int, int | float | str]] = {}
        refused: dict[tuple[int, int], int] = {}
        if any(group == FE_GPU for group, _ in keys):
            update_us = int(_IDENTITY_UPDATE_SECONDS * 1e6)
            names = []
            for part, chunk in enumerate(split(keys, self._adapter.group_limit)):
                name = self.group("identity" + (f"e{part}" if part else ""))
                answer = self._watch_known(
                    name, chunk, self.known_only(IDENTITY_FIELDS), update_us, 2 * _IDENTITY_UPDATE_SECONDS
                )
                refused.update(answer)
                if len(answer) < len(chunk):
                    names.append(name)
            self._names += names
            self.update_all()
            for name in names:
                for sample in self._adapter.latest(name):
                    decoded = decode(sample)
                    if not isinstance(decoded, Blank):
                        values.setdefault((sample.group, sample.entity), {})[sample.field_id] = decoded
        self.topology = build(entities, values)
        self._refused(refused, previous)
        try:  # once per discovery, as the identity fields
            self.topology.devices = with_p2p(self.topology, self._adapter.p2p_status())
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            log.info("DCGM P2P status not available: %s", err)
        return self.topology

    def update_all(self) -> None:
        """``dcgmUpdateAllFields``: a first fill of new watches (its failure only delays values)."""
        try:
            self._adapter.update_all()
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            log.debug("dcgmUpdateAllFields: %s", err)

    def watch(self, watch_events: bool) -> bool:
        """Watch what the specs need on the current topology; True when an Xid group was created."""
        topology = self.topology
        gpus = [(FE_GPU, gpu) for gpu in topology.gpus.values()]
        if not gpus:
            return False
        computes = [(FE_GPU_CI, compute) for compute in topology.migs.values()]
        update_us = int(self._interval * 1e6)
        plain = plain_fields(s for s in self._specs if not is_profiling(s) and s.root == "gpu")
        mig = plain_fields(s for s in self._specs if s.mig and not is_profiling(s))
        linked = [(FE_GPU, gpu) for gpu in topology.gpus.values() if topology.ports(FE_GPU, gpu)]
        ports = {port for gpu in topology.gpus.values() for port in topology.port_numbers(FE_GPU, gpu)}
        per_link = link_fields((s for s in self._specs if s.root == "gpu"), ports)
        switch_specs = [s for s in self._specs if s.root == "fabric"]
        switches = [(FE_SWITCH, switch) for switch in topology.switches]
        switch_fields = (
            sorted({*plain_fields(s for s in switch_specs if not s.per_link), *NVSWITCH_IDENTITY_FIELDS})
            if switch_specs
            else []
        )
        switch_ports = [e.key for switch in topology.switches for e in topology.ports(FE_SWITCH, switch)]
        port_fields = plain_fields(s for s in switch_specs if s.per_link)
        keep = self.keep_age()
        for need, entities, fields in (("gpu", gpus, plain), ("mig", computes, mig)):
            if entities:
                self._names += self._watch(need, entities, fields, update_us, keep)
        for need, entities, fields in (
            ("links", linked, per_link), ("switch", switches, switch_fields), ("ports", switch_ports, port_fields),
        ):  # fmt: skip
            if entities:
                self._optional(need, entities, fields, update_us)
        self._watch_profiling()
        created = False
        if watch_events:
            owned = [key for key in topology.owner if key[0] in (FE_GPU, FE_GPU_I, FE_GPU_CI)]
            # Kept long enough that no Xid expires between two reads, even when a cycle is late.
            self.xid_groups = self._watch("xid", owned, (FI_XID_ERRORS,), update_us, max(10 * self._interval, 60.0))
            created = bool(self.xid_groups)
        self.update_all()
        return created

    def _optional(self, need: str, entities: Sequence[tuple[int, int]], fields: Sequence[int], update_us: int) -> None:
        try:
            self._names += self._watch(need, entities, fields, update_us, self.keep_age())
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            self._once(
                f"watch {need}", "DCGM refused the %s watch (%s); those series stay absent, the rest is unaffected",
                need, err, level=logging.WARNING,
            )  # fmt: skip

    def _watch_profiling(self) -> None:
        """Ask each GPU which profiling fields it supports (per GPU, so per model), group GPUs by
        that set and watch each set on its GPUs and their MIG instances."""
        wanted = frozenset(
            self.known_only(s.dcgm.field_id for s in self._specs if s.dcgm is not None and is_profiling(s))
        )
        if not wanted:
            return
        state = self.profiling
        by_fields: dict[frozenset[int], list[int]] = {}
        for uuid, gpu in self.topology.gpus.items():
            if gpu in self.topology.refused:
                continue
            try:
                supported = self._adapter.profiling_fields(gpu) & wanted
            except DcgmConnectionLost:
                raise
            except DcgmModuleNotLoaded as err:  # the engine's module is missing, not the GPU's support
                self._not_loaded(err)
                state.supported[gpu] = frozenset()
                continue
            except DcgmNotSupported:
                supported = frozenset()
            except DcgmError as err:
                self.profiling_failed([gpu], err)
                state.pending.append((wanted, (gpu,)))
                continue
            state.supported[gpu] = supported
            device = next((d for d in self.topology.devices if d.uuid == uuid), None)
            model = (device.name if device is not None else "") or uuid
            if not supported:
                self._once(f"prof-none {model}", "%s does not support DCGM profiling metrics; they stay absent", model)
            elif supported != wanted:
                listed = ",".join(map(str, sorted(supported)))
                self._once(f"prof-some {model}", "%s supports profiling fields %s only", model, listed)
            if supported:
                by_fields.setdefault(supported, []).append(gpu)
        state.pending += [(fields, tuple(gpus)) for fields, gpus in by_fields.items()]
        self.retry_profiling(force=True)

    def retry_profiling(self, force: bool = False) -> None:
        """Watch the pending profiling sets again (once a minute, or now with ``force``)."""
        state = self.profiling
        if not state.pending or (not force and self._clock() < state.retry_at):
            return
        pending, state.pending = state.pending, []
        for fields, gpus in pending:
            if not state.supported.keys() >= set(gpus):
                # The support query itself failed: ask again first.
                try:
                    for gpu in gpus:
                        state.supported[gpu] = self._adapter.profiling_fields(gpu) & fields
                except DcgmConnectionLost:
                    raise
                except DcgmError as err:
                    self.profiling_failed(list(gpus), err)
                    state.pending.append((fields, gpus))
                    continue
                fields = frozenset().union(*(state.supported[gpu] for gpu in gpus))
                if not fields:
                    continue
            self._serial += 1
            entities = [(FE_GPU, gpu) for gpu in gpus] + [
                (FE_GPU_CI, compute) for (uuid, _slot), compute in self.topology.migs.items()
                if self.topology.gpus[uuid] in gpus
            ]  # fmt: skip
            try:
                names = self._watch(f"prof{self._serial}", entities, sorted(fields), int(self._interval * 1e6),
                                    self.keep_age())  # fmt: skip
            except DcgmConnectionLost:
                raise
            except (DcgmModuleNotLoaded, DcgmNotSupported) as err:
                self._not_loaded(err)  # not available: no retry
                continue
            except DcgmError as err:
                self.profiling_failed(list(gpus), err)
                state.pending.append((fields, gpus))
                continue
            self._names += names
            for gpu in gpus:
                if state.failing.pop(gpu, None) is not None:
                    log.info("DCGM profiling metrics available again on GPU id %d", gpu)
        if state.pending:
            state.retry_at = self._clock() + state.delay
            state.delay = min(2 * state.delay, PROFILING_RETRY_MAX_SECONDS)
        else:
            state.delay = PROFILING_RETRY_SECONDS

    def _not_loaded(self, err: DcgmError) -> None:
        self._once(
            f"prof-unavailable {err.kind}", "DCGM profiling metrics are not available (%s): %s; they stay absent, "
            "nothing is retried. %s", err.kind, err, PROFILING_FIXES.get(err.kind, ""),
        )  # fmt: skip

    def profiling_failed(self, gpus: Iterable[int], err: DcgmError) -> None:
        if isinstance(err, DcgmProfilingInUse):
            kind = "profiling_in_use"
        elif isinstance(err, DcgmNoPermission):
            kind = "profiling_no_permission"
        else:
            kind = "profiling_failed"
        for gpu in gpus:
            self.profiling.failing[gpu] = kind
        self._once(
            kind, "DCGM profiling metrics unavailable (%s): %s; other metrics are unaffected. Fix: %s",
            kind, err, PROFILING_FIXES[kind], level=logging.WARNING,
        )  # fmt: skip
