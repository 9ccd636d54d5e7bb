"""The connection of the DCGM backend: connect (a standalone host engine, else an embedded one),
probe, the field ids the connected engine knows, and what a lost connection drops.

``--dcgm.address HOST:PORT`` connects to that standalone nv-hostengine only. Without it the backend
tries the local standalone engine (``localhost:5555``) first, then starts an embedded engine in this
process; the mode that connected first is kept for every reconnect.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable

from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError, DcgmUnavailable
from gpu_exporter.backends.dcgm.errors import FIXES, DcgmUnusable
from gpu_exporter.backends.dcgm.fields import split, wanted_fields
from gpu_exporter.backends.dcgm.groups import GROUP_PREFIX
from gpu_exporter.backends.dcgm.releases import id_ranges
from gpu_exporter.backends.dcgm.values import FE_GPU, FI_UUID, Blank, decode
from gpu_exporter.backends.dcgm.watches import Watches
from gpu_exporter.catalogue import MetricSpec

log = logging.getLogger(__name__)

#: What ``probe`` asks every GPU for to see that DCGM answers GPU values: UUID, temperature, power,
#: GPU utilisation, framebuffer used (device fields every release knows; no global field).
PROBE_FIELDS = frozenset({FI_UUID, 150, 155, 203, 252})
#: The local standalone host engine tried first when no --dcgm.address is given.
DEFAULT_STANDALONE = "localhost:5555"
CONNECT_TIMEOUT_MS = 2000


class Connection:
    """The connection state of :class:`~gpu_exporter.backends.dcgm.backend.DcgmBackend`, which sets
    every attribute declared here in its ``__init__``, and the methods that connect, probe and drop it."""

    _factory: Callable[[], DcgmAdapter]
    _adapter: DcgmAdapter | None
    _specs: tuple[MetricSpec, ...]
    _targets: list[str | None]
    _lock: threading.RLock
    _known: frozenset[int] | None
    _not_served: list[int]
    _connected: bool
    mode: str
    _token: str
    _events_ok: bool
    _watches: Watches | None
    _logged: set[str]

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
