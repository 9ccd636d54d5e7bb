"""The DCGM backend: catalogue metrics, MIG instances, NVLinks, NVSwitches, profiling and Xid
events through a :class:`~gpu_exporter.backends.dcgm.adapter.DcgmAdapter`.

Connection: ``--dcgm.address HOST:PORT`` connects to that standalone nv-hostengine only. Without
it the backend tries the local standalone engine (``localhost:5555``) first, then starts an
embedded engine in this process. The mode that connected first is kept for every reconnect, so a
restarting host engine is waited for rather than replaced by a second engine competing for the
profiling lock.

Watches (:mod:`.watches`): one field group per need, split to the engine's group limit; groups
with the ``gpu-exporter-`` prefix left by earlier runs are destroyed at each connect. Fields are
sampled by DCGM at the collect interval and kept for a few intervals.

Refused GPUs: a GPU DCGM lists but will not group (Lost, Unsupported, Detached) is left out of the
groups and reported as a device whose reads raise :class:`DeviceLost` with the reason (``gpu_up
0``), under its earlier identity when it was lost at runtime, else as ``GPU-dcgm-<id>``; every
other GPU is sampled as usual. :meth:`DcgmBackend.discover` asks the engine again with backoff
and rebuilds the watches when it accepts the GPU.

Reads: each GPU's worker fetches the latest values of that GPU and its MIG instances with one
``dcgmEntitiesGetLatestValues`` call, so a call that hangs on one GPU stalls only that GPU; no lock
is held across a vendor call except while watches are rebuilt. The fabric worker reads the
NVSwitches and their ports, notices NVLink ports appearing or going away (and rebuilds the
watches), retries failed profiling watches, and fetches recorded Xids into the event queue the
sampler drains.

Failures: blank sentinels and "no data yet" are absent samples; "not supported" is reported to the
pipeline's memo; other statuses are counted by kind. A profiling module the engine has not loaded
is "profiling not available" (one log line, never retried). When the profiling module is locked by
another profiler or lacks permission, profiling values are absent, every read of an affected GPU
counts ``profiling_in_use`` (or ``profiling_no_permission``), one log line says how to fix it, the
watch is retried with backoff (1 minute doubling to 10), and everything else keeps working. A lost
connection makes reads raise :class:`DeviceLost` and :meth:`DcgmBackend.discover` raise
:class:`BackendUnavailable`, so the sampler closes the backend and reopens it with backoff.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from gpu_exporter import model
from gpu_exporter.backends.base import (
    BackendUnavailable,
    DeviceIdentity,
    DeviceLost,
    Event,
    HostIdentity,
    RawReading,
    Request,
)
from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError, DcgmUnavailable
from gpu_exporter.backends.dcgm.errors import FIXES, DcgmUnusable
from gpu_exporter.backends.dcgm.fabric import fill_switches, switch_keys, xid_events
from gpu_exporter.backends.dcgm.fill import drop_stale, fetch, fill, port_samples
from gpu_exporter.backends.dcgm.health import GpuHealth
from gpu_exporter.backends.dcgm.releases import id_ranges
from gpu_exporter.backends.dcgm.topology import Topology, layout
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_LINK,
    FI_UUID,
    ST_GPU_IS_LOST,
    Blank,
    FieldValue,
    decode,
)
from gpu_exporter.backends.dcgm.watches import (
    GROUP_PREFIX,
    PROFILING_RETRY_SECONDS,
    Watches,
    is_profiling,
    link_fields,
    plain_fields,
    split,
    wanted_fields,
)
from gpu_exporter.catalogue import MetricSpec

log = logging.getLogger(__name__)

__all__ = ["GROUP_PREFIX", "PROFILING_RETRY_SECONDS", "DcgmBackend", "DcgmUnusable"]

#: A value the engine stamped longer ago than this many collect intervals (at least the seconds
#: below) is stale: dropped, and counted as ``gpu_exporter_sample_errors_total{kind="stale"}``.
STALE_INTERVALS = 4
STALE_MIN_SECONDS = 5.0
#: What ``probe`` asks every GPU for to see that DCGM answers GPU values: UUID, temperature, power,
#: GPU utilisation, framebuffer used (device fields every release knows; no global field).
PROBE_FIELDS = frozenset({FI_UUID, 150, 155, 203, 252})
#: The local standalone host engine tried first when no --dcgm.address is given.
DEFAULT_STANDALONE = "localhost:5555"
CONNECT_TIMEOUT_MS = 2000


class DcgmBackend:
    """GPU samples through DCGM. Reads run on several worker threads at once; ``_lock`` guards the
    connection state and the swap of :class:`Watches`, never a read."""

    name = "dcgm"

    def __init__(
        self,
        adapter_factory: Callable[[], DcgmAdapter],
        specs: Sequence[MetricSpec],
        interval: float,
        address: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._factory = adapter_factory
        self._adapter: DcgmAdapter | None = None
        self._specs = tuple(spec for spec in specs if spec.dcgm is not None)
        #: Link states are read only when some metric needs them.
        self._wants_links = any(spec.per_link for spec in self._specs)
        self._interval = interval
        self._targets: list[str | None] = [address] if address else [DEFAULT_STANDALONE, None]
        self._clock = clock
        self._wall = wall  # the engine stamps samples in µs since the epoch
        self._lock = threading.RLock()  # connection state and the swap of watches; never held across a vendor call
        self._rebuild_lock = threading.Lock()  # one rebuild at a time (discovery, a port change)
        self._generation = 0  # numbers the watches of one connection: a rebuild's groups need new names
        self._known: frozenset[int] | None = None  # field ids the connected engine knows
        self._not_served: list[int] = []  # field ids wanted but unknown to the engine
        self._health = GpuHealth()
        self._connected = False
        self.mode = ""  # "standalone HOST:PORT" or "embedded", once connected
        self._token = ""
        self._watch_events = False
        self._watches: Watches | None = None
        self._since: dict[str, int] = {}  # Xid group → the engine timestamp to read from next
        self._since_floor: int | None = None  # where a new Xid group starts reading
        self._events: deque[Event] = deque(maxlen=100_000)
        self._events_ok = False
        self._logged: set[str] = set()  # one-time log lines already written

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
                self._known = None
                return self.mode
            raise self._unusable("connect_failed", "; ".join(attempts))

    def probe(self) -> tuple[str, int]:
        """Connect (kept for :meth:`open`) and count the GPUs DCGM would sample: (mode, GPUs). A GPU
        the engine lists but refuses to group (lost, unsupported: a GeForce) does not count."""
        with self._lock:
            mode = self.connect()
            try:
                adapter = self._adapter_now()
                gpus = [entity.key for entity in adapter.entities() if entity.group == FE_GPU]
                fields = sorted(self._known_fields(adapter) & PROBE_FIELDS)
                refused: dict[tuple[int, int], int] = {}
                answered = 0
                for part in split(gpus, adapter.group_limit):
                    name = f"{GROUP_PREFIX}{self._token}-probe"
                    refused.update(adapter.watch(name, part, fields, 60_000_000, 120.0))
                    try:
                        adapter.update_all()
                        accepted = [key for key in part if key not in refused]
                        values = adapter.latest_of(accepted, fields) if accepted else []
                    finally:
                        adapter.unwatch(name)
                    answered += len({(v.group, v.entity) for v in values if not isinstance(decode(v), Blank)})
            except DcgmError as err:
                if isinstance(err, DcgmConnectionLost):
                    self._lost(err)
                raise self._unusable(f"dcgm_{err.kind}", f"DCGM ({mode}) cannot watch GPU values: {err}") from err
            if len(gpus) > len(refused) and answered == 0:
                raise self._unusable("dcgm_no_values", f"DCGM ({mode}) answers no GPU value")
            return mode, len(gpus) - len(refused)

    def _unusable(self, reason: str, detail: str) -> DcgmUnusable:
        where = ", ".join("embedded" if t is None else t for t in self._targets)
        fix = FIXES.get(reason, "see the DCGM host engine's log, or use --backend nvml")
        if reason == "connect_failed":
            fix = (
                f"start nv-hostengine (systemctl start nvidia-dcgm) or correct --dcgm.address (tried {where}), or "
                "run with --backend nvml"
            )
        return DcgmUnusable(reason, detail, fix)

    def _known_fields(self, adapter: DcgmAdapter) -> frozenset[int]:
        """The field ids the connected engine knows, of all the exporter may ask (asked once per
        connection); the rest is logged once and not served."""
        if self._known is None:
            wanted = wanted_fields(self._specs)
            self._known = adapter.known_fields(wanted)
            self._not_served = sorted(set(wanted) - self._known)
            if self._not_served:
                log.warning(
                    "DCGM %s does not know %d field id(s) the exporter would ask for (%s); they are not asked "
                    "and their series are not served (a newer DCGM serves them)",
                    adapter.release or "(release unknown)", len(self._not_served), id_ranges(self._not_served),
                )  # fmt: skip
        return self._known

    def not_served(self) -> dict[str, int]:
        """Field ids the exporter would ask for but the engine cannot answer, counted by reason."""
        release = self._adapter.release if self._adapter is not None else ""
        unknown = set(self._not_served)
        if self._watches is not None:
            unknown |= self._watches.unknown
        return {f"unknown to DCGM {release or '(release unknown)'}": len(unknown)} if unknown else {}

    def _lost(self, err: Exception) -> None:
        """The connection is gone: drop it; the sampler's discover() call turns this into a reopen."""
        with self._lock:
            if self._connected:
                log.error("DCGM connection lost (%s): %s; reconnecting with backoff", self.mode, err)
            self._connected = False
            self._events_ok = False
            if self._adapter is not None:
                self._adapter.disconnect()

    def _adapter_now(self) -> DcgmAdapter:
        if not self._connected or self._adapter is None:
            raise DcgmConnectionLost(-21, "not connected to DCGM")
        return self._adapter

    def _once(self, key: str, message: str, *args: object, level: int = logging.INFO) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args)

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
                self._rebuild(adapter)
            except DcgmConnectionLost as err:
                self._lost(err)
                raise BackendUnavailable("connection_lost", f"DCGM connection lost while starting: {err}") from err
            except DcgmError as err:  # the engine refused a request: the connection itself is fine
                raise BackendUnavailable(
                    f"dcgm_{err.kind}", f"setting up DCGM watches failed ({err.kind}, not a lost connection): {err}"
                ) from err
            topology = self._topology()
            log.info(
                "DCGM (%s): %d GPU(s) (%d refused), %d MIG compute instance(s), %d NVSwitch(es), %d NVLink port(s)",
                self.mode, len(topology.gpus), len(topology.refused), len(topology.migs), len(topology.switches),
                sum(1 for e in topology.entities if e.group == FE_LINK),
            )  # fmt: skip
            return topology.host, topology.devices

    def discover(self) -> Sequence[DeviceIdentity]:
        """Enumerate again; when GPUs or MIG instances changed, rebuild identities and watches.
        Raises BackendUnavailable when the connection is gone."""
        # No lock is held across the engine's calls: a hung call here leaves reads going on with the
        # entities known before (they take the lock only to pick up the current watches).
        try:
            with self._lock:
                adapter, watches = self._adapter_now(), self._watches
            if layout(adapter.entities()) != self._topology().layout:
                log.info("DCGM entities changed; rebuilding watches")
                self._rebuild(adapter)
            elif watches is not None and watches.probe_refused():
                log.info("DCGM groups a GPU it refused before; rebuilding watches")
                self._rebuild(adapter)
        except DcgmConnectionLost as err:
            self._lost(err)
            raise BackendUnavailable(
                "connection_lost", f"DCGM ({self.mode or 'not connected'}) stopped answering: {err}"
            ) from err
        except DcgmError as err:  # a refused request: keep what is watched, say what it was
            self._once(
                f"discover {err.kind}", "DCGM refused a discovery request (%s): %s; sampling goes on with the "
                "entities known before", err.kind, err, level=logging.WARNING,
            )  # fmt: skip
        return self._topology().devices

    def _topology(self) -> Topology:
        return self._watches.topology if self._watches is not None else Topology()

    def _rebuild(self, adapter: DcgmAdapter) -> None:
        """Read identities for the current entities and watch what the specs need in new groups (a
        new generation's names), then swap them in and drop the previous ones: readers keep the
        previous watches until the new ones are in place, and ``_lock`` is held only for the swap."""
        with self._rebuild_lock:
            old = self._watches
            previous = old.topology if old is not None else None
            self._generation += 1
            token = f"{self._token}-{self._generation}"
            known = self._known_fields(adapter)
            watches = Watches(adapter, token, self._specs, self._interval, self._once, self._clock, known)
            try:
                watches.identify(adapter.entities(), previous)
                created = watches.watch(self._watch_events)
            except DcgmError:
                watches.drop()
                raise
            if watches.unknown:
                self._once(
                    f"unknown {sorted(watches.unknown)}", "the DCGM engine refused field id(s) %s as unknown although "
                    "its library knows them (library and engine of different releases?); they are not served",
                    id_ranges(sorted(watches.unknown)), level=logging.WARNING,
                )  # fmt: skip
            with self._lock:
                if created:
                    if self._since_floor is None:
                        # Count from now: Xids DCGM kept from before this exporter started are not ours to count.
                        self._since_floor = max(adapter.since(name, 0)[1] for name in watches.xid_groups)
                    elif self._since:
                        self._since_floor = max(self._since.values())
                    self._since = dict.fromkeys(watches.xid_groups, self._since_floor)
                self._events_ok = self._watch_events
                self._watches = watches
            if old is not None:
                old.drop()

    def _refresh_links(self, adapter: DcgmAdapter, reading: RawReading) -> dict[tuple[int, int, int], int]:
        """The NVLink port states (``dcgmGetNvLinkLinkStatus``). When the set of ports differs from
        the one the watches were built for (a port or switch appeared or went away), rebuild the
        watches first. A failed status call leaves every state unknown (``…_nvlink_up`` absent)."""
        try:
            states = adapter.link_states()
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            reading.failed(err.kind, "nvlink")
            self._once("link states", "dcgmGetNvLinkLinkStatus failed: %s; NVLink states are absent meanwhile", err)
            return {}
        topology = self._topology()
        known = {(e.parent[0], e.parent[1], e.link) for e in topology.entities if e.group == FE_LINK and e.parent}
        if set(states) != known:
            log.info("DCGM NVLink ports changed (%d now, %d before); rebuilding watches", len(states), len(known))
            self._rebuild(adapter)
        return states

    # reads -----------------------------------------------------------------------------------
    def read(self, device: DeviceIdentity, request: Request) -> RawReading:
        """The requested rows of one GPU, its NVLinks and its MIG instances, from one fetch of their
        latest values. Raises DeviceLost."""
        reading = RawReading()
        try:
            with self._lock:
                adapter, watches = self._adapter_now(), self._watches
            specs = [spec for spec in request.specs if spec.dcgm is not None and spec.root == "gpu"]
            link_specs = [spec for spec in specs if spec.per_link]
            if watches is None:
                raise DeviceLost("DCGM watches are not set up")
            gpu = watches.topology.gpus.get(device.uuid)
            # Only a GPU with ports asks for their states (the fabric worker notices a first port).
            has_ports = gpu is not None and bool(watches.topology.ports(FE_GPU, gpu))
            states = self._refresh_links(adapter, reading) if link_specs and has_ports else {}
            with self._lock:
                watches = self._watches
                if watches is not None:
                    watches.retry_profiling()  # due once a minute while a profiling watch is refused
            if watches is None:
                raise DeviceLost("DCGM watches are not set up")
            topology, profiling = watches.topology, watches.profiling
            gpu = topology.gpus.get(device.uuid)
            if gpu is None:
                raise DeviceLost(f"{device.uuid} is no longer enumerated by DCGM", "not_enumerated")
            if gpu in topology.refused:
                raise DeviceLost(
                    f"{device.uuid}: {topology.refused[gpu]}; not sampled, tried again with backoff",
                    topology.refused_kind.get(gpu, "refused"),
                )
            failing = profiling.failing.get(gpu)
            if failing is not None and any(is_profiling(spec) for spec in specs):
                reading.failed(failing, "profiling")
            supported = profiling.supported.get(gpu, frozenset()) if failing is None else frozenset()
            usable = [s for s in specs if not is_profiling(s) or (s.dcgm and s.dcgm.field_id in supported)]
            ports = topology.port_numbers(FE_GPU, gpu) if link_specs else ()
            computes = [topology.migs.get((device.uuid, slot)) for slot in range(len(device.migs))]
            keys = [(FE_GPU, gpu), *((FE_GPU_CI, c) for c in computes if c is not None)]
            fields = watches.known_only(
                {*plain_fields(s for s in usable if not s.per_link), *link_fields(link_specs, ports)}
            )
            latest = fetch(adapter, keys, fields, reading, usable)
            fresh_after_us = int((self._wall() - max(STALE_INTERVALS * self._interval, STALE_MIN_SECONDS)) * 1e6)
            down = self._health.check(
                gpu, latest.get((FE_GPU, gpu), {}), fresh_after_us, lambda: adapter.gpu_status(gpu)
            )
            latest = drop_stale(latest, fresh_after_us, reading, usable)
        except DcgmConnectionLost as err:
            self._lost(err)
            raise DeviceLost(f"DCGM connection lost: {err}", "connection_lost") from err
        samples = latest.get((FE_GPU, gpu), {})
        if any(sample.status == ST_GPU_IS_LOST for sample in samples.values()):
            raise DeviceLost(f"{device.uuid}: DCGM reports the GPU lost")
        if down is not None:
            raise DeviceLost(f"{device.uuid}: {down.message}", down.reason)
        asks = request.asks
        fill(reading, model.gpu(device.index, device.uuid), samples, [s for s in usable if "gpu" in s.entities], asks)
        link_usable = [s for s in usable if s.per_link]
        for port in ports:
            entity = model.nvlink(device.index, device.uuid, port)
            fill(
                reading,
                entity,
                port_samples(samples, link_usable, port),
                link_usable,
                asks,
                states.get((FE_GPU, gpu, port)),
            )
        mig_specs = [spec for spec in usable if spec.mig]
        for mig, compute in zip(device.migs, computes, strict=True):
            if compute is None:
                continue
            entity = model.mig(
                device.index, device.uuid, mig.gpu_instance, mig.compute_instance, mig.profile, mig.uuid, mig.name
            )
            fill(reading, entity, latest.get((FE_GPU_CI, compute), {}), mig_specs, asks)
        return reading

    def read_fabric(self, request: Request) -> RawReading:
        """The NVSwitches and their ports; also the host-wide duties: port changes, profiling
        retries and the Xids DCGM recorded since the last call (queued for the sampler)."""
        reading = RawReading()
        try:
            with self._lock:
                if not self._connected or self._watches is None:
                    return reading
                adapter = self._adapter_now()
            states = self._refresh_links(adapter, reading) if self._wants_links else {}
            with self._lock:
                watches = self._watches
                watches.retry_profiling()
            self._fetch_xids(adapter, watches)
            specs = [spec for spec in request.specs if spec.dcgm is not None and spec.root == "fabric"]
            if specs:
                keys, fields = switch_keys(watches.topology, specs)
                latest = fetch(adapter, keys, fields, reading, specs)
                fill_switches(reading, latest, watches.topology, specs, states, request.asks)
        except DcgmConnectionLost as err:
            self._lost(err)
        return reading

    def _fetch_xids(self, adapter: DcgmAdapter, watches: Watches) -> None:
        if not watches.xid_groups:
            return
        samples: list[FieldValue] = []
        for name in watches.xid_groups:
            since = self._since.get(name, self._since_floor)
            if since is None:
                continue
            try:
                found, self._since[name] = adapter.since(name, since)
            except DcgmConnectionLost:
                raise
            except DcgmError as err:
                self._events_ok = False
                log.debug("reading Xid values: %s", err)
                return
            samples += found
        self._events_ok = True
        self._events.extend(xid_events(samples, watches.topology.owner))

    # events and closing ----------------------------------------------------------------------
    def drain_events(self) -> list[Event]:
        """Xids the fabric worker queued since the last call (deque pops: no lock, never blocks)."""
        out = []
        while True:
            try:
                out.append(self._events.popleft())
            except IndexError:
                return out

    def events_healthy(self) -> bool:
        """False while the Xid group is missing or the last fetch failed."""
        return self._events_ok

    def close(self) -> None:
        """Disconnect (the engine drops our groups and watches); safe when not connected."""
        with self._lock:
            if self._connected and self._adapter is not None:
                self._adapter.disconnect()
            self._connected = False
            self._events_ok = False
            self._watches = None
