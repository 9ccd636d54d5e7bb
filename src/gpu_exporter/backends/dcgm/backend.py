"""The DCGM backend: catalogue metrics, MIG instances, NVLinks, NVSwitches, profiling and Xid
events through a :class:`~gpu_exporter.backends.dcgm.adapter.DcgmAdapter`.

Connection: ``--dcgm.address HOST:PORT`` connects to that standalone nv-hostengine only. Without
it the backend tries the local standalone engine (``localhost:5555``) first, then starts an
embedded engine in this process. The mode that connected first is kept for every reconnect, so a
restarting host engine is waited for rather than replaced by a second engine competing for the
profiling lock (:mod:`.connection`).

Watches (:mod:`.watches`): one field group per need, split to the engine's group limit; groups
with the ``gpu-exporter-`` prefix left by earlier runs are destroyed at each connect. Fields are
sampled by DCGM at the collect interval and kept for a few intervals.

Refused GPUs: a GPU DCGM lists but will not group (Lost, Unsupported, Detached) is left out of the
groups and reported as a device whose reads raise :class:`DeviceLost` with the reason (``gpu_up
0``), under its earlier identity when it was lost at runtime, else as ``GPU-dcgm-<id>``; every
other GPU is sampled as usual. :meth:`DcgmBackend.discover` asks the engine again with backoff
and rebuilds the watches when it accepts the GPU (:mod:`.discovery`).

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
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, DeviceLost, Event, RawReading, Request, WatchVerdict
from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.connection import DEFAULT_STANDALONE
from gpu_exporter.backends.dcgm.discovery import Discovery
from gpu_exporter.backends.dcgm.errors import DcgmUnusable
from gpu_exporter.backends.dcgm.fabric import fill_switches, switch_keys, xid_events
from gpu_exporter.backends.dcgm.fields import is_profiling, link_fields, plain_fields
from gpu_exporter.backends.dcgm.fill import drop_stale, fetch, fill, port_samples
from gpu_exporter.backends.dcgm.groups import GROUP_PREFIX
from gpu_exporter.backends.dcgm.health import GpuHealth
from gpu_exporter.backends.dcgm.healthwatch import HealthWatch
from gpu_exporter.backends.dcgm.processes import DcgmProcesses, wanted
from gpu_exporter.backends.dcgm.profiling import PROFILING_RETRY_SECONDS
from gpu_exporter.backends.dcgm.values import FE_GPU, FE_GPU_CI, ST_GPU_IS_LOST, FieldValue
from gpu_exporter.backends.dcgm.watches import Watches
from gpu_exporter.catalogue import MetricSpec

log = logging.getLogger(__name__)

__all__ = ["GROUP_PREFIX", "PROFILING_RETRY_SECONDS", "DcgmBackend", "DcgmUnusable"]

#: A value the engine stamped longer ago than this many collect intervals (at least the seconds
#: below) is stale: dropped, and counted as ``gpu_exporter_sample_errors_total{kind="stale"}``.
STALE_INTERVALS = 4
STALE_MIN_SECONDS = 5.0


class DcgmBackend(Discovery):
    """GPU samples through DCGM. Reads run on several worker threads at once; ``_lock`` guards the
    connection state and the swap of :class:`Watches`, never a read."""

    name = "dcgm"
    default_interval = 1.0  # point reads of the engine's latest values: the busy-time integral needs them often

    def __init__(
        self,
        adapter_factory: Callable[[], DcgmAdapter],
        specs: Sequence[MetricSpec],
        interval: float,
        address: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        compat_identity: bool = True,
    ) -> None:
        """``compat_identity``: also ask the engine for the GPUs' NVLink P2P status at each discovery
        (only dcgm-exporter's names show it)."""
        self._factory = adapter_factory
        self._compat_identity = compat_identity
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
        self._profiling_released = False  # a profiling pause: the profiling fields are not watched
        self._known: frozenset[int] | None = None  # field ids the connected engine knows
        self._not_served: list[int] = []  # field ids wanted but unknown to the engine
        self._health = GpuHealth()
        self._healthwatch = HealthWatch(clock, wall)  # DCGM's own health watches (:mod:`.healthwatch`)
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
        #: Processes per GPU (:mod:`.processes`): refreshed by the fabric worker, copied by GPU reads.
        self._process_specs = wanted(self._specs)
        self._processes = DcgmProcesses(interval, clock)

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
            if failing is None and gpu in profiling.supported:  # asked: the rest are not in its metric groups
                gpu_entity = model.gpu(device.index, device.uuid)
                for spec in specs:
                    if (
                        is_profiling(spec)
                        and spec.dcgm
                        and spec.dcgm.field_id not in supported
                        and "gpu" in spec.entities
                    ):
                        reading.unsupported.append(
                            (gpu_entity, spec.key, f"DCGM field {spec.dcgm.field_id} ({spec.name}) is not in this "
                             "GPU's profiling metric groups")
                        )  # fmt: skip
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
        gpu_entity = model.gpu(device.index, device.uuid)
        process_specs = [s for s in wanted(specs) if asks(gpu_entity.uid, s.key)]
        if process_specs:
            self._processes.fill(reading, gpu_entity, gpu, process_specs)
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
            if self._process_specs:
                topology = watches.topology
                gpu_ids = sorted(set(topology.gpus.values()) - set(topology.refused))
                self._processes.refresh(adapter, watches.group("pids"), gpu_ids, reading)
            self._healthwatch.poll()  # starts a due check on its own thread; never waits for one
            for kind, count in self._healthwatch.take_counts().items():  # stalls and failures, as self-metrics
                reading.errors[kind] = reading.errors.get(kind, 0) + count
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

    def health_watch(self) -> WatchVerdict | None:
        """The verdict of DCGM's health watches (:mod:`.healthwatch`): no vendor call, never blocks."""
        return self._healthwatch.verdict()

    def events_healthy(self) -> bool:
        """False while the Xid group is missing or the last fetch failed."""
        return self._events_ok

    def close(self) -> None:
        """Remove our groups and watches, then disconnect (or stop the embedded engine); safe when not
        connected. A full pause relies on it: nothing of ours stays in the engine."""
        self._healthwatch.detach()
        with self._lock:
            watches = self._watches if self._connected else None
        if watches is not None:
            try:
                self._processes.drop(self._adapter_now())
                watches.drop()
            except DcgmError as err:  # the engine drops them on disconnect anyway (persistAfterDisconnect = 0)
                log.debug("removing DCGM watches before disconnecting: %s", err)
        with self._lock:
            if self._connected and self._adapter is not None:
                self._adapter.disconnect()
            self._connected = False
            self._events_ok = False
            self._watches = None
