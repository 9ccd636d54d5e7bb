"""The DCGM watches of one connection: identity, GPU, MIG, NVLink, NVSwitch, profiling and Xid
groups, each named ``gpu-exporter-<pid>-<nonce>-<need>``, and which fields each GPU may be asked for.

Entities the engine lists but will not group (a Lost, Unsupported or Detached GPU, and its MIG
instances and links) are left out of every group; such a GPU stays a device, refused, and is tried
again with backoff (:meth:`Watches.probe_refused`). Every group is split to the engine's group
limit (``adapter.group_limit``: 64 entities on DCGM 3.x, 1024 on 4.x) and to 127 fields
(dcgmFieldGroupCreate refuses 128): :mod:`.groups`.

Profiling fields are watched per set of fields a GPU supports (:mod:`.profiling`). NVLink and
NVSwitch watches are optional: one the engine refuses costs only its own series. Which field ids
the specs ask for: :mod:`.fields`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.fields import is_profiling, link_fields, plain_fields, split
from gpu_exporter.backends.dcgm.profiling import Profiling, ProfilingWatches
from gpu_exporter.backends.dcgm.topology import Topology, build, with_p2p
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_SWITCH,
    FI_UUID,
    FI_XID_ERRORS,
    IDENTITY_FIELDS,
    Blank,
    Entity,
    decode,
)
from gpu_exporter.catalogue import NVSWITCH_IDENTITY_FIELDS, MetricSpec

log = logging.getLogger(__name__)

#: How often a GPU the engine refused to group is tried again: first wait, doubling to the longest.
REFUSED_RETRY_SECONDS = 30.0
REFUSED_RETRY_MAX_SECONDS = 300.0
#: Identity fields hardly change: sampled once a minute, read at discovery.
_IDENTITY_UPDATE_SECONDS = 60.0


class Watches(ProfilingWatches):
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
        p2p: bool = True,
    ) -> None:
        self._adapter = adapter
        self._p2p = p2p  # ask for the NVLink P2P status at each discovery (dcgm-exporter's names show it)
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
        #: The groups holding every GPU once (the first field chunk's): DCGM's health watches are set on them.
        self.health_groups: list[str] = []
        self.topology = Topology()
        self.refused_retry_at = 0.0
        self.refused_delay = REFUSED_RETRY_SECONDS

    def drop(self) -> None:
        """Unwatch every group of this connection."""
        for name in (*self._names, *self.xid_groups):
            self._adapter.unwatch(name)
        self._names, self.xid_groups = [], []
        self.profiling = Profiling()

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
        if not self._p2p:
            return self.topology
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
                names = self._watch(need, entities, fields, update_us, keep)
                self._names += names
                if need == "gpu":
                    first = self.group("gpu0")
                    self.health_groups = [n for n in names if n == first or n.startswith(first + "e")]
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
