"""Opening and discovery of the DCGM backend: stale groups destroyed, entities enumerated, the
watches rebuilt in a new generation of groups and swapped in (when GPUs, MIG instances or NVLink
ports change, or the engine groups a GPU it refused before)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from gpu_exporter.backends.base import BackendUnavailable, DeviceIdentity, HostIdentity, RawReading
from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.connection import Connection
from gpu_exporter.backends.dcgm.fields import is_profiling
from gpu_exporter.backends.dcgm.groups import GROUP_PREFIX
from gpu_exporter.backends.dcgm.healthwatch import HealthWatch
from gpu_exporter.backends.dcgm.releases import id_ranges
from gpu_exporter.backends.dcgm.topology import Topology, layout
from gpu_exporter.backends.dcgm.values import FE_LINK
from gpu_exporter.backends.dcgm.watches import Watches

log = logging.getLogger(__name__)


class Discovery(Connection):
    """The watches of :class:`~gpu_exporter.backends.dcgm.backend.DcgmBackend` (which sets every
    attribute declared here in its ``__init__``): open, discover, rebuild."""

    _interval: float
    _clock: Callable[[], float]
    _rebuild_lock: threading.Lock
    _profiling_released: bool
    _generation: int
    _watch_events: bool
    _since: dict[str, int]
    _since_floor: int | None
    _compat_identity: bool
    _healthwatch: HealthWatch

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

    def release_profiling(self, released: bool) -> None:
        """For a profiling pause: rebuild the watches without (True) or again with (False) the profiling
        fields, so DCGM's profiling module stops sampling and another profiler can take the counters. The
        connection and every other watch stay; a connection lost meanwhile is reopened without them too."""
        if released == self._profiling_released:
            return
        self._profiling_released = released
        log.info("DCGM profiling watches %s", "removed for a profiling pause" if released else "restored")
        with self._lock:
            connected = self._connected
        if not connected:
            return
        try:
            self._rebuild(self._adapter_now())
        except DcgmConnectionLost as err:
            self._lost(err)
            raise BackendUnavailable("connection_lost", f"DCGM connection lost rebuilding the watches: {err}") from err

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
            # Released for a profiling pause: no profiling group is watched, so the engine lets go of the lock.
            specs = tuple(s for s in self._specs if not (self._profiling_released and is_profiling(s)))
            watches = Watches(
                adapter, token, specs, self._interval, self._once, self._clock, known, self._compat_identity
            )
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
            # The groups are new: DCGM's health watches are set on them again.
            self._healthwatch.attach(adapter, watches.health_groups, watches.topology.owner)
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
