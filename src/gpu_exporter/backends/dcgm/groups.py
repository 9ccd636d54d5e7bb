"""The DCGM groups of one connection's watches: names (``gpu-exporter-<pid>-<nonce>-<need>``), the
split to the engine's limits (``adapter.group_limit`` entities, 127 fields), field ids the engine
refuses as unknown (found by halving), and GPUs it refuses to group."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from gpu_exporter.backends.dcgm.adapter import DcgmAdapter, DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.fields import split
from gpu_exporter.backends.dcgm.topology import Topology, refusal, refusal_kind, refuse
from gpu_exporter.backends.dcgm.values import FE_GPU, MAX_IDS_PER_FIELD_GROUP, ST_BADPARAM

#: Prefix of every group this exporter creates in DCGM (stale ones are destroyed at connect).
GROUP_PREFIX = "gpu-exporter-"


def _chunks(fields: Sequence[int]) -> list[tuple[int, ...]]:
    return [tuple(fields[i : i + MAX_IDS_PER_FIELD_GROUP]) for i in range(0, len(fields), MAX_IDS_PER_FIELD_GROUP)]


class Groups:
    """The group handling of :class:`~gpu_exporter.backends.dcgm.watches.Watches`, which sets every
    attribute declared here in its ``__init__``."""

    _adapter: DcgmAdapter
    known: frozenset[int] | None
    unknown: set[int]
    _token: str
    _interval: float
    _once: Callable[..., None]
    topology: Topology

    def group(self, need: str) -> str:
        return f"{GROUP_PREFIX}{self._token}-{need}"

    def keep_age(self) -> float:
        return max(3 * self._interval, 5.0)

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
