"""The surface the DCGM backend sees: :class:`DcgmAdapter`, implemented over the real bindings by
:class:`~gpu_exporter.backends.dcgm.adapter.PydcgmAdapter` and in memory by ``tests/dcgmfake.py``;
the contract tests run against both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpu_exporter.backends.dcgm.incidents import HealthResponse
from gpu_exporter.backends.dcgm.pidvalues import PidUtilization, RunningProcess
from gpu_exporter.backends.dcgm.values import Entity, FieldValue

#: Entities refused by dcgmGroupAddEntity, each with its DCGM status.
Refused = dict[tuple[int, int], int]
#: DcgmEntityStatus_t (dcgm_structs.h) → the word :meth:`DcgmAdapter.gpu_status` answers.
GPU_STATUSES: dict[int, str] = {
    0: "unknown", 1: "ok", 2: "unsupported", 3: "inaccessible", 4: "lost", 5: "fake", 6: "disabled", 7: "detached",
}  # fmt: skip


class DcgmAdapter(Protocol):
    """What the DCGM backend needs from DCGM. Every method but :meth:`disconnect` raises
    :class:`DcgmError` (typed by status); calls before :meth:`connect` or after
    :meth:`disconnect` raise :class:`DcgmConnectionLost` without touching DCGM."""

    #: Where the bindings were imported from (for logs and gpu_exporter_backend_info).
    source: str
    #: The most entities one group, or one :meth:`latest_of` call, may hold (DCGM 3.x: 64, 4.x: 1024).
    group_limit: int

    @property
    def release(self) -> str:
        """The DCGM release the library reports (``4.4.2``), "" before :meth:`connect` or unknown."""

    def known_fields(self, field_ids: Sequence[int]) -> frozenset[int]:
        """The ids of ``field_ids`` the engine's field table holds: an engine refuses a whole field
        group (DCGM_ST_BADPARAM) when one id in it is unknown to its release."""

    def gpu_status(self, gpu_id: int) -> str:
        """The engine's status of a GPU: a word of :data:`GPU_STATUSES` (``ok``, ``lost``,
        ``unsupported``, ``detached``, ...), or ``inactive`` where the release (3.x) can only say
        that the GPU is not among its supported ones."""

    def connect(self, address: str | None, timeout_ms: int) -> None:
        """Connect to a standalone nv-hostengine at ``HOST:PORT``, or start an embedded host
        engine in this process when ``address`` is None."""

    def disconnect(self) -> None:
        """Disconnect (standalone) or stop the embedded engine; the engine drops our groups and
        watches. Never raises."""

    def entities(self) -> list[Entity]:
        """GPUs, MIG GPU and compute instances (with NVML's instance ids), NVSwitches, and the
        NVLink ports of GPUs and NVSwitches that exist (up, down or disabled)."""

    def link_states(self) -> dict[tuple[int, int, int], int]:
        """NVLink port states now, by (owner group, owner id, port): DCGM's link state (1 disabled,
        2 down, 3 up); ports that do not exist are left out. Raises :class:`DcgmError` when the
        status call fails (:meth:`entities` then lists no link)."""

    def p2p_status(self) -> dict[int, dict[int, int]]:
        """``dcgmGetNvLinkP2PStatus``: DCGM GPU id → peer GPU id → NVLink P2P status (DCGM's enum
        mirrors nvmlGpuP2PStatus_t: 0 OK ... 6 unknown); empty where the release lacks the call.
        Raises :class:`DcgmError` when the call fails."""

    def remove_stale(self, prefix: str) -> int:
        """Destroy entity groups and field groups whose name starts with ``prefix`` and that this
        adapter did not create (left by an earlier run); returns how many were destroyed."""

    def watch(
        self,
        name: str,
        entities: Sequence[tuple[int, int]],
        field_ids: Sequence[int],
        update_us: int,
        keep_age_s: float,
    ) -> Refused:
        """Create an entity group and a field group both called ``name`` and watch them: DCGM
        samples every field every ``update_us`` µs and keeps ``keep_age_s`` seconds of samples.
        Entities the engine refuses to group (a Lost, Unsupported or Detached GPU and the MIG
        instances on it; :data:`REFUSED_STATUSES`) are left out and returned with their status;
        when it refuses them all, nothing is watched and ``name`` stays unknown. More than
        :attr:`group_limit` entities raise :class:`DcgmError` (DCGM_ST_MAX_LIMIT)."""

    def unwatch(self, name: str) -> None:
        """Stop watching ``name`` and destroy its groups (unknown names are ignored)."""

    def update_all(self) -> None:
        """Make the engine sample every watched field now and wait for it (a first fill)."""

    def latest(self, name: str) -> list[FieldValue]:
        """The latest sample of every field of ``name`` for every entity of it, in one call."""

    def latest_of(self, entities: Sequence[tuple[int, int]], field_ids: Sequence[int]) -> list[FieldValue]:
        """``dcgmEntitiesGetLatestValues``: the latest value of each field on each entity (watched
        pairs only; others come back with a status), without a group. More than :attr:`group_limit`
        entities: DCGM_ST_BADPARAM."""

    def since(self, name: str, since_us: int) -> tuple[list[FieldValue], int]:
        """Every sample of ``name`` recorded at or after ``since_us`` (engine clock, µs), and the
        timestamp to pass next time."""

    def profiling_fields(self, gpu_id: int) -> frozenset[int]:
        """The profiling field ids GPU ``gpu_id`` supports (its metric groups). Raises
        :class:`DcgmModuleNotLoaded` when the engine runs without its profiling module."""

    # processes (:mod:`.pidvalues` says what each value is) -------------------------------------
    def watch_processes(self, name: str, gpu_ids: Sequence[int], update_us: int, keep_age_s: float) -> None:
        """A group ``name`` of these GPUs with ``dcgmWatchPidFields`` on it, and a field group ``name``
        of the pid lists and SM samples (fields 211, 220, 221) watched at ``update_us``."""

    def process_samples(self, name: str, since_us: int) -> tuple[list[RunningProcess], dict[int, int], int]:
        """``dcgmGetValuesSince_v2`` on ``name``: the pid list samples since ``since_us``, the SM
        samples counted per GPU id, and the time to pass next."""

    def start_job(self, name: str, job_id: str) -> None:
        """``dcgmJobStartStats`` on group ``name`` (DCGM_ST_DUPLICATE_KEY for a job id in use)."""

    def job_processes(self, job_id: str) -> list[PidUtilization]:
        """``dcgmJobGetStats``: each GPU's pids seen since the job started, with DCGM's smUtil and memUtil."""

    def remove_job(self, job_id: str) -> None:
        """``dcgmJobRemove``; an unknown job id is ignored."""

    # health watches -------------------------------------------------------------------------
    def health_set(self, name: str, systems: int, update_us: int, keep_age_s: float) -> None:
        """``dcgmHealthSet_v2`` on the entity group of watch ``name``: DCGM watches the health systems
        in ``systems`` (dcgmHealthSystems_t bits) on its entities, sampling their fields every
        ``update_us`` µs and keeping ``keep_age_s`` seconds of them."""

    def health_get(self, name: str) -> int:
        """``dcgmHealthGet``: the systems mask set on the group of watch ``name`` (0: none)."""

    def health_check(self, name: str) -> HealthResponse:
        """``dcgmHealthCheck`` on the group of watch ``name``, in the response version of the library's
        release (3.x: v4, 4.x: v5; another is DCGM_ST_VER_MISMATCH). It may take long (tens of seconds
        under an ECC storm): the caller bounds it."""
