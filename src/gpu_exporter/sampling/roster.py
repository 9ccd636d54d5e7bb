"""The GPUs a sampler reads, by UUID: new ones get a worker, vanished ones are marked and, after the
retention time, forgotten; a stand-in for a GPU that could not be identified goes once it is known."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from gpu_exporter.backends.base import DeviceIdentity, RawReading
from gpu_exporter.sampling.roots import RootState
from gpu_exporter.sampling.worker import Worker

log = logging.getLogger(__name__)


class Roster:
    """Per-GPU root state by UUID; only the sampler thread changes it."""

    def __init__(self, worker_for: Callable[[DeviceIdentity], Worker[RawReading]]) -> None:
        self._worker_for = worker_for
        self._states: dict[str, RootState] = {}

    def __iter__(self) -> Iterator[RootState]:
        return iter(list(self._states.values()))

    def get(self, uuid: str) -> RootState | None:
        return self._states.get(uuid)

    def answering(self) -> dict[str, DeviceIdentity | None]:
        """The identities of the GPUs neither lost nor vanished, by UUID."""
        return {
            uuid: state.identity for uuid, state in self._states.items() if not state.lost and state.vanished_at is None
        }

    def needs_rediscovery(self) -> bool:
        """True while a GPU is lost or out of the driver's device list."""
        return any(state.vanished_at is not None or state.lost for state in self._states.values())

    def adopt(self, devices: Sequence[DeviceIdentity], now: float) -> None:
        """Start workers for new GPUs, refresh identities, and mark GPUs that vanished."""
        seen = {device.uuid for device in devices}
        for device in devices:
            state = self._states.get(device.uuid)
            if state is None:
                self._states[device.uuid] = RootState(self._worker_for(device), device)
                continue
            if state.vanished_at is not None:
                log.info("GPU %s is back", device.uuid)
            state.vanished_at = None
            state.identity = device
        for uuid, state in list(self._states.items()):
            if uuid not in seen and state.identity is not None and state.identity.placeholder:
                # A GPU that could not be identified is now known under its UUID: that is its recovery,
                # and the stand-in goes at once (it would report the GPU down for the retention time).
                log.info("GPU %d is identified now (%s): up, replacing its stand-in", state.identity.index, uuid)
                state.worker.stop()
                del self._states[uuid]
            elif uuid not in seen and state.vanished_at is None:
                assert state.identity is not None
                log.error("GPU %d (%s) vanished from the driver's device list", state.identity.index, uuid)
                state.vanished_at = now

    def forget_vanished(self, now: float, retention: float) -> list[str]:
        """Forget the GPUs out of the driver's list for longer than ``retention``: their UUIDs."""
        forgotten = []
        for uuid, state in list(self._states.items()):
            if state.vanished_at is not None and now - state.vanished_at > retention:
                log.info("GPU %s has been out of the driver's device list for %.0fs: forgotten", uuid, retention)
                state.worker.stop()
                del self._states[uuid]
                forgotten.append(uuid)
        return forgotten
