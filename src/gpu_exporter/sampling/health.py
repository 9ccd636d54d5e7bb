"""The GPU health model: for each GPU and each of DCGM's health-watch subsystems, pass, warn or fail,
with the reason and the recommended action, derived from what one cycle read.

A pure stage over the cycle's device views and Xid tallies, with the little memory counters and
events need: when each Xid code's count last grew (an Xid is a past event, kept for
:data:`XID_HOLD_SECONDS`) and the last minute of PCIe replay and NVLink error counts (DCGM's health
watches judge rates per minute). The rules, each from a value the exporter already reads:

- **driver**: a GPU that is down (lost, vanished, ...) fails, action reboot; a read that hangs warns;
  the driver's recovery action (``nvmlDeviceGpuRecoveryAction_t``, NVML field 230, DCGM 1523) fails
  with its action (reset, reboot, drain).
- **mem**: unrepairable memory or a failed row remap fail (service); uncorrected volatile ECC errors
  fail (reset); a pending row remap or page retirement warns (reset) — as DCGM's memory watch.
- **inforom**: a corrupt inforom warns (service), as DCGM's inforom watch.
- **thermal**, **power**: a hardware thermal slowdown or power brake in force warns.
- **pcie**: more than :data:`PCIE_REPLAYS_PER_MINUTE` replays in a minute warn (DCGM's limit).
- **nvlink**: NVLink errors in the last minute warn; fabric health unhealthy or registration
  finished with an error fail (drain), limited capacity warns.
- every subsystem: each Xid in the last hour, by the Xid table's action bucket and group.

A subsystem is reported only where at least one of its inputs was read (absence is absence); the
Xids are an input of every subsystem while driver events are watched. GPUs the inventory expects but
the backend does not list count as missing: the node fails, action reboot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpu_exporter.backends.base import WatchVerdict
from gpu_exporter.catalogue import XID_CODES, keys
from gpu_exporter.catalogue.health_rules import (
    ACTIONS,
    FAIL,
    INPUTS,
    NVLINK_ERRORS,
    PASS,
    PCIE_REPLAYS_PER_MINUTE,
    POWER,
    RATE_WINDOW_SECONDS,
    RECOVERY,
    STATUS_NAMES,
    SUBSYSTEMS,
    THERMAL,
    UNCORRECTED,
    WARN,
    XID_BUCKETS,
    XID_GROUPS,
    XID_HOLD_SECONDS,
    XID_SUBSYSTEM,
)
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.inventory import ExpectedGpus

if TYPE_CHECKING:  # the snapshot holds a Health: imported for the annotations only
    from gpu_exporter.sampling.snapshot import DeviceView

__all__ = ["ACTIONS", "FAIL", "PASS", "STATUS_NAMES", "SUBSYSTEMS", "WARN", "XID_HOLD_SECONDS", "Finding", "GpuHealth",
           "Health", "HealthModel"]  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One problem: the subsystem, how bad (WARN or FAIL), what to do, why, and DCGM's failure code."""

    subsystem: str
    status: int
    action: str
    reason: str
    code: str = "DCGM_FR_XID_ERROR"
    #: From the vendor's own health watches (DCGM's), not derived from the fields.
    watch: bool = False


def _worst(findings: Iterable[Finding]) -> Finding | None:
    """The worst finding: by status, then action; of equals, the watches' own (its code is DCGM's)."""
    return max(findings, key=lambda f: (f.status, ACTIONS.index(f.action), f.watch), default=None)


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's health: the subsystems judged this cycle and the problems found."""

    index: int
    uuid: str
    checked: tuple[str, ...]
    findings: tuple[Finding, ...] = ()

    def status_of(self, subsystem: str) -> Finding | None:
        """The worst finding of ``subsystem``, None where it passes."""
        return _worst(f for f in self.findings if f.subsystem == subsystem)

    @property
    def worst(self) -> Finding | None:
        """The worst finding (by status, then action), None where every subsystem passes."""
        return _worst(self.findings)

    @property
    def status(self) -> int:
        worst = _worst(self.findings)
        return PASS if worst is None else worst.status

    @property
    def action(self) -> str:
        return max((f.action for f in self.findings), key=ACTIONS.index, default="none")

    @property
    def reason(self) -> str:
        worst = _worst(self.findings)
        return "" if worst is None else worst.reason


@dataclass(frozen=True)
class Health:
    """The node's health in one cycle: ``known`` is False until the backend answered; ``expected`` the
    inventory's GPU count (None when not set), ``present`` the GPUs the backend lists (up or down)."""

    known: bool = False
    gpus: tuple[GpuHealth, ...] = ()
    expected: int | None = None
    present: int = 0

    @property
    def missing(self) -> int:
        return max(0, self.expected - self.present) if self.expected is not None else 0

    @property
    def status(self) -> int:
        return max([FAIL if self.missing else PASS, *(gpu.status for gpu in self.gpus)])

    @property
    def action(self) -> str:
        return max(["reboot" if self.missing else "none", *(gpu.action for gpu in self.gpus)], key=ACTIONS.index)

    def problems(self) -> list[str]:
        """One line per problem, worst first: ``GPU 1: <reason>: <action>``, then the missing GPUs."""
        lines = [
            (gpu.status, ACTIONS.index(gpu.action), f"GPU {gpu.index}: {gpu.reason}: {gpu.action}")
            for gpu in self.gpus
            if gpu.findings
        ]
        if self.missing:
            lines.append((FAIL, ACTIONS.index("reboot"), f"{self.missing} of {self.expected} GPUs missing: reboot"))
        return [line for *_, line in sorted(lines, key=lambda t: (-t[0], -t[1]))]


@dataclass
class _Memory:
    xid_counts: dict[int, int] = field(default_factory=dict)
    xid_seen: dict[int, float] = field(default_factory=dict)  # code → wall time its count last grew
    counters: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)  # key → (wall, value)


class HealthModel:
    """Judges each cycle; keeps per GPU uuid what the rules over time need (only the sampler thread calls it)."""

    def __init__(self, expected: int | ExpectedGpus | None = None) -> None:
        """``expected``: the GPUs the node should have, fixed or as the inventory says each cycle."""
        self._expected = expected if isinstance(expected, ExpectedGpus) else ExpectedGpus(expected)
        self._memory: dict[str, _Memory] = {}

    def assess(
        self,
        devices: Sequence[DeviceView],
        events: Mapping[str, XidTally] | None,
        wall: float,
        known: bool = True,
        watch: WatchVerdict | None = None,
    ) -> Health:
        """The health of this cycle's ``devices`` at Unix time ``wall``; ``events`` is None when driver
        events are not watched; ``known`` is False while the backend is down; ``watch`` is the verdict of
        the backend's own health watches (DCGM's), None where it has none."""
        listed = {device.identity.uuid for device in devices}
        for uuid in [uuid for uuid in self._memory if uuid not in listed]:  # forgotten GPUs: their memory too
            del self._memory[uuid]
        judged = (self._gpu(device, events, wall) for device in devices)
        gpus = tuple(_watched(gpu, watch) if device.up else gpu for device, gpu in zip(devices, judged, strict=True))
        return Health(known, gpus, self._expected.current(), len(devices))

    def _gpu(self, device: DeviceView, events: Mapping[str, XidTally] | None, wall: float) -> GpuHealth:
        ident = device.identity
        memory = self._memory.setdefault(ident.uuid, _Memory())
        findings: list[Finding] = []
        checked = set(SUBSYSTEMS) if events is not None else set()
        if events is not None:
            findings += self._xids(memory, events.get(ident.uuid, XidTally()), wall)
        if not device.up:
            reason = f"GPU is down ({device.down_reason or 'lost'})"
            findings.append(Finding("driver", FAIL, "reboot", reason, "DCGM_FR_FALLEN_OFF_BUS"))
            checked.add("driver")
            return GpuHealth(ident.index, ident.uuid, _ordered(checked), tuple(findings))
        if device.stalled:
            findings.append(
                Finding("driver", WARN, "none", "a read of the GPU has not returned", "DCGM_FR_CANNOT_GET_STAT")
            )
        values = device.values
        checked.update(name for name, inputs in INPUTS.items() if any(key in values for key in inputs))
        findings += _levels(values)
        findings += self._rates(memory, device, wall, checked)
        checked.update(finding.subsystem for finding in findings)
        return GpuHealth(ident.index, ident.uuid, _ordered(checked), tuple(findings))

    @staticmethod
    def _xids(memory: _Memory, tally: XidTally, wall: float) -> list[Finding]:
        for code, count in tally.xid.items():
            if count > memory.xid_counts.get(code, 0):
                memory.xid_seen[code] = wall
            memory.xid_counts[code] = count
        found = []
        for code, at in list(memory.xid_seen.items()):
            if wall - at > XID_HOLD_SECONDS:
                del memory.xid_seen[code]
                continue
            xid = XID_CODES.get(code)
            status, action = XID_BUCKETS.get(xid.bucket, (PASS, "none")) if xid else (WARN, "none")
            if xid is not None and xid.severity == "info" or status == PASS:
                continue
            subsystem = XID_SUBSYSTEM.get(code) or XID_GROUPS.get(xid.group if xid else "", "driver")
            what = xid.description if xid else "not in the Xid table"
            found.append(Finding(subsystem, status, action, f"Xid {code} ({what})"))
        return found

    @staticmethod
    def _rates(memory: _Memory, device: DeviceView, wall: float, checked: set[str]) -> list[Finding]:
        """PCIe replays and NVLink errors in the last minute (counters, so their increase)."""
        totals: dict[str, float] = {}
        if (replays := device.values.get(keys.PCIE_REPLAYS)) is not None:
            totals["pcie"] = replays
        links = [v for entity, vs in device.samples.items() if entity.kind == "nvlink" for k in NVLINK_ERRORS
                 if (v := vs.get(k)) is not None]  # fmt: skip
        if links:
            totals["nvlink"] = sum(links)
            checked.add("nvlink")
        found = []
        for name, total in totals.items():
            series = memory.counters.setdefault(name, deque())
            if series and total < series[-1][1]:
                series.clear()  # the counter restarted (driver reload): a new baseline
            series.append((wall, total))
            while len(series) > 1 and series[1][0] <= wall - RATE_WINDOW_SECONDS:
                series.popleft()
            grown = total - series[0][1]
            if name == "pcie" and grown > PCIE_REPLAYS_PER_MINUTE:
                reason = f"{grown:.0f} PCIe replays in the last minute (more than {PCIE_REPLAYS_PER_MINUTE})"
                found.append(Finding("pcie", WARN, "none", reason, "DCGM_FR_PCI_REPLAY_RATE"))
            elif name == "nvlink" and grown > 0:
                reason = f"{grown:.0f} NVLink errors in the last minute"
                found.append(Finding("nvlink", WARN, "none", reason, "DCGM_FR_NVLINK_ERROR_THRESHOLD"))
        return found


def _levels(values: Mapping[str, float]) -> list[Finding]:
    """The findings of the GPU's current levels and flags."""
    found = []
    rules = (
        (keys.MEMORY_UNREPAIRABLE, 1, "mem", FAIL, "service", "memory has an unrepairable error",
         "DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT"),
        (keys.ROW_REMAP_FAILED, 1, "mem", FAIL, "service", "a row remap failed", "DCGM_FR_ROW_REMAP_FAILURE"),
        (UNCORRECTED, 1, "mem", FAIL, "reset_gpu", "uncorrected ECC errors since the driver loaded",
         "DCGM_FR_VOLATILE_DBE_DETECTED"),
        (keys.ROW_REMAP_PENDING, 1, "mem", WARN, "reset_gpu", "a row remap is pending", "DCGM_FR_PENDING_ROW_REMAP"),
        (keys.RETIRED_PAGES_PENDING, 1, "mem", WARN, "reset_gpu", "pages wait to be retired",
         "DCGM_FR_PENDING_PAGE_RETIREMENTS"),
        (THERMAL, 1, "thermal", WARN, "none", "hardware thermal slowdown", "DCGM_FR_CLOCKS_EVENT_THERMAL"),
        (POWER, 1, "power", WARN, "none", "hardware power brake slowdown", "DCGM_FR_CLOCKS_EVENT_POWER"),
    )  # fmt: skip
    for key, at_least, subsystem, status, action, reason, code in rules:
        value = values.get(key)
        if value is not None and value >= at_least:
            found.append(Finding(subsystem, status, action, reason, code))
    if values.get(keys.INFOROM_VALID) == 0:
        found.append(Finding("inforom", WARN, "service", "the inforom is corrupt", "DCGM_FR_CORRUPT_INFOROM"))
    recovery = values.get(keys.RECOVERY_ACTION)
    if recovery is not None and int(recovery) in RECOVERY:
        status, what, code = RECOVERY[int(recovery)]
        found.append(Finding("driver", status, what, f"the driver asks for recovery action {int(recovery)}", code))
    fabric = values.get(keys.FABRIC_HEALTH)
    if fabric in (2, 3):
        status, what = (FAIL, "unhealthy") if fabric == 2 else (WARN, "limited capacity")
        found.append(Finding("nvlink", status, "drain", f"NVLink fabric {what}", "DCGM_FR_FABRIC_PROBE_STATE"))
    if values.get(keys.FABRIC_STATE) == 4:
        reason = "NVLink fabric registration finished with an error"
        found.append(Finding("nvlink", FAIL, "drain", reason, "DCGM_FR_FABRIC_PROBE_STATE"))
    return found


def _watched(gpu: GpuHealth, watch: WatchVerdict | None) -> GpuHealth:
    """``gpu`` with the verdict of the vendor's health watches added: each subsystem they judge is
    checked, and their incidents on this GPU are findings beside the field-derived ones (the worst
    counts; a pass from the watches never hides a field-derived problem). Watches that cannot tell add
    a warning that says so, and the subsystems are judged from the fields alone."""
    if watch is None:
        return gpu
    if not watch.known:
        finding = Finding("driver", WARN, "none", f"DCGM health watches cannot tell: {watch.why}",
                          "DCGM_FR_CANNOT_GET_STAT", watch=True)  # fmt: skip
        return replace(gpu, checked=_ordered({*gpu.checked, "driver"}), findings=(*gpu.findings, finding))
    found = tuple(
        Finding(i.subsystem, i.status, i.action, f"DCGM {i.subsystem} watch: {i.message}", i.code, watch=True)
        for i in watch.incidents
        if i.uuid == gpu.uuid
    )
    return replace(gpu, checked=_ordered({*gpu.checked, *watch.subsystems}), findings=(*gpu.findings, *found))


def _ordered(subsystems: set[str]) -> tuple[str, ...]:
    return tuple(name for name in SUBSYSTEMS if name in subsystems)
