"""The stand-in's engine in a process of its own (tests/dcgmstandin/sitecustomize.py): a
:class:`~tests.dcgmfake.FakeDcgm` built from a fake-NVML scenario file and kept in step with it.

- the file is read again when its modification time or size changes (GPUs' values, links, P2P);
- ``gpuN.lost_after = S``: from S seconds after the engine started, GPU N's status is Lost (the fake's
  ``entity_status``, or its ``lose_gpu`` where it has one); removing the key brings it back;
- ``dcgm.gpuN.aged_after = S`` (a stand-in key, not the fake NVML's): from S seconds after start the
  engine stops updating GPU N: its samples keep the time they had then (``FakeDcgm.aged``);
- ``dcgm.hostengine = HOST:PORT|none`` (a stand-in key): where a standalone host engine answers
  (default ``localhost:5555``); ``none``: nowhere, only an embedded engine starts;
- ``dcgm.gpuN.refused = lost|unsupported|detached`` (a stand-in key): the engine lists GPU N but in
  that status (group add refuses it with GPU_IS_LOST, GPU_NOT_SUPPORTED or BADPARAM) while the key is there;
- ``dcgm.gpuN.health_incident = SYSTEM RESULT CODE[, ...]`` (a stand-in key): what DCGM's health module
  finds on GPU N, e.g. ``mem fail 4`` (DCGM_FR_VOLATILE_DBE_DETECTED) or ``pcie warn 3``: SYSTEM a
  health-watch system (``pcie`` ... ``driver``, or ``all`` for a devastating Xid), RESULT ``warn`` or
  ``fail``, CODE a dcgmError_t number; a check reports it as the engine's release would;
- ``dcgm.health_check_stall = 1`` (a stand-in key): dcgmHealthCheck does not return while the key is there.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import ModuleType

from gpu_exporter.backends.dcgm.incidents import RESULT_FAIL, RESULT_WARN, SYSTEM_ALL, SYSTEM_NAMES
from gpu_exporter.backends.dcgm.releases import parse_version
from gpu_exporter.backends.dcgm.values import FE_GPU, ST_GPU_IS_LOST
from tests.dcgmfake import FakeDcgm, from_scenario, scenario_keys
from tests.dcgmlib_standin import StandInLibrary, install, release_of

#: ``dcgm.gpuN.refused`` → the status dcgmGroupAddEntity refuses the GPU with (FakeDcgm.entity_status).
REFUSALS = {"lost": -18, "unsupported": -22, "detached": -1}
#: State a scenario describes; watches, connections and groups stay the engine's.
HOST_STATE = ("entity_list", "values", "globals", "link_state", "p2p", "profiling_support", "energy_power")


def _per_gpu(keys: dict[str, str], prefix: str, suffix: str) -> dict[int, str]:
    """``{N: value}`` of the keys ``<prefix>N<suffix>``."""
    found = {}
    for key, value in keys.items():
        number = key[len(prefix) : -len(suffix)] if key.startswith(prefix) and key.endswith(suffix) else ""
        if number.isdigit():
            found[int(number)] = value
    return found


class ScenarioEngine:
    """Keeps ``engine`` equal to what the scenario file says, called before every C function."""

    def __init__(self, path: Path, engine: FakeDcgm) -> None:
        self.path = path
        self.engine = engine
        self.started = time.monotonic()
        self.seen: tuple[float, int] | None = None
        self.lost_after: dict[int, float] = {}
        self.lost: set[int] = set()
        self.aged_after: dict[int, float] = {}
        self.refused: dict[int, str] = {}
        self.applied: dict[int, str] = {}
        self.refresh()

    def _build(self, text: str) -> FakeDcgm:
        return from_scenario(text)

    def refresh(self) -> None:
        try:
            stat = self.path.stat()
        except OSError:
            return
        if self.seen != (stat.st_mtime, stat.st_size):
            self.seen = (stat.st_mtime, stat.st_size)
            text = self.path.read_text()
            fresh = self._build(text)
            for name in HOST_STATE:
                setattr(self.engine, name, getattr(fresh, name))
            self.engine.pids.processes = fresh.pids.processes  # what runs; the pid cache stays the engine's
            keys = scenario_keys(text)
            self.lost_after = {gpu: float(v) for gpu, v in _per_gpu(keys, "gpu", ".lost_after").items()}
            self.aged_after = {gpu: float(v) for gpu, v in _per_gpu(keys, "dcgm.gpu", ".aged_after").items()}
            self.refused = _per_gpu(keys, "dcgm.gpu", ".refused")
            self.engine.health_incidents = []
            bits = {name: bit for bit, name in SYSTEM_NAMES.items()} | {"all": SYSTEM_ALL}
            for gpu, text in _per_gpu(keys, "dcgm.gpu", ".health_incident").items():
                for item in text.split(","):
                    system, result, code = item.split()
                    outcome = RESULT_FAIL if result == "fail" else RESULT_WARN
                    self.engine.stage_incident(gpu, bits[system], outcome, int(code), f"staged {system} {result}")
            stall = self.engine.health_stall
            if keys.get("dcgm.health_check_stall"):
                if stall is None or stall.is_set():
                    self.engine.health_stall = threading.Event()
            elif stall is not None:
                stall.set()  # the stalled check returns
                self.engine.health_stall = None
            hostengine = keys.get("dcgm.hostengine", "localhost:5555")
            self.engine.reachable = {None} if hostengine == "none" else {hostengine, None}
        elapsed = time.monotonic() - self.started
        lost = {gpu for gpu, after in self.lost_after.items() if elapsed >= after}
        for gpu in lost - self.lost:
            self._set_lost(gpu, True)
        for gpu in self.lost - lost:
            self._set_lost(gpu, False)
        self.lost = lost
        for gpu, after in self.aged_after.items():
            if elapsed >= after and (FE_GPU, gpu) not in self.engine.aged:
                self.engine.aged[(FE_GPU, gpu)] = self.engine.now_us()  # its samples keep this time
        for key in [key for key in self.engine.aged if key[0] == FE_GPU and key[1] not in self.aged_after]:
            del self.engine.aged[key]
        for gpu in set(self.refused) | set(self.applied):
            if self.refused.get(gpu) != self.applied.get(gpu):
                if gpu in self.refused:
                    self.engine.entity_status[(FE_GPU, gpu)] = REFUSALS[self.refused[gpu]]
                else:
                    self.engine.entity_status.pop((FE_GPU, gpu), None)
        self.applied = dict(self.refused)

    def _set_lost(self, gpu: int, lost: bool) -> None:
        own = getattr(self.engine, "lose_gpu" if lost else "recover_gpu", None)
        if callable(own):
            own(gpu)
        elif lost:
            self.engine.entity_status[(FE_GPU, gpu)] = ST_GPU_IS_LOST
        else:
            self.engine.entity_status.pop((FE_GPU, gpu), None)


def new_engine(release: tuple[int, int, int]) -> FakeDcgm:
    """A fresh engine playing ``release`` (its field table, group limit and link id packing)."""
    engine = FakeDcgm()
    engine.release = ".".join(map(str, release))
    engine.__post_init__()  # the release's group limit
    return engine


def install_from_environment(structs: ModuleType) -> StandInLibrary:
    """Install the stand-in into ``structs`` over the engine ``DCGM_STANDIN_SCENARIO`` describes."""
    named = os.environ.get("DCGM_STANDIN_RELEASE")
    release = parse_version(named) if named else release_of(structs)
    assert release is not None, f"DCGM_STANDIN_RELEASE={named!r} is not a release (4.4.2)"
    other = os.environ.get("DCGM_STANDIN_ENGINE_RELEASE")  # a standalone engine of another release
    engine_release = parse_version(other) if other else release
    assert engine_release is not None, f"DCGM_STANDIN_ENGINE_RELEASE={other!r} is not a release (4.4.2)"
    engine = new_engine(engine_release)
    scenario = ScenarioEngine(Path(os.environ["DCGM_STANDIN_SCENARIO"]), engine)
    library = install(structs, engine, release)
    library.before_call = scenario.refresh
    library.trace = os.environ.get("DCGM_STANDIN_TRACE") or None
    return library
