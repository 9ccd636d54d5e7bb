"""A snapshot as cards: one per GPU and one per MIG instance, plain data ready for JSON.

Every value is in the catalogue's base units (ratios, bytes, watts, hertz, degrees Celsius) and is
``None`` where the snapshot has no sample: absence stays absence, never 0. ``problems`` lists in
words what deserves a look (lost, stalled, hot, throttled, degraded link, Xid, ECC, row remapping);
``backend_problem`` says in words why the backend is down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpu_exporter.catalogue import CLOCK_EVENT_REASONS, XID_CODES, key_of, keys
from gpu_exporter.model import Entity
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.snapshot import DeviceView, Snapshot
from gpu_exporter.simulate.builtins import SIMULATED
from gpu_exporter.status.activity import activity, busy_low_sm
from gpu_exporter.status.health import gpu_health, node_health
from gpu_exporter.status.usage import allocation_name, unattributed, usage

Card = dict[str, Any]

#: Clock-event reasons in the words nvidia-smi's readers know.
REASON_WORDS: dict[str, str] = {
    "gpu_idle": "idle",
    "applications_clocks": "application clocks setting",
    "power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "SW thermal slowdown",
    "hw_thermal": "HW thermal slowdown",
    "hw_power_brake": "HW power brake",
    "display_clocks": "display clocks setting",
}
#: Reasons that are a throttle worth highlighting (idle and settings are not).
THROTTLES = frozenset({"power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})
#: A GPU this close to its slowdown threshold (degrees Celsius) is highlighted as hot.
HOT_MARGIN_CELSIUS = 10.0
#: The card values the status page keeps a recent trail of (sparklines), by the sample key they come from.
TRAIL: dict[str, str] = {
    "utilization_ratio": keys.UTILIZATION,
    "power_watts": keys.POWER,
    "temperature_celsius": keys.TEMPERATURE,
}
#: The key of each clock-event reason's row, in the catalogue's order.
_CLOCK_EVENT_KEYS = {name: key_of(keys.CLOCK_EVENT_ACTIVE, (("reason", name),)) for name, _bit in CLOCK_EVENT_REASONS}
_ECC_UNCORRECTED_VOLATILE = key_of(keys.ECC_ERRORS, (("type", "uncorrected"), ("counter", "volatile")))
_ECC_CORRECTED_VOLATILE = key_of(keys.ECC_ERRORS, (("type", "corrected"), ("counter", "volatile")))


def _get(values: Mapping[str, float], key: str) -> float | None:
    value = values.get(key)
    return None if value is None else float(value)


def _count(values: Mapping[str, float], key: str) -> int | None:
    """A whole number (a PCIe generation or width, a count) as an int, None where absent."""
    value = values.get(key)
    return None if value is None else round(value)


def _pid(labels: Mapping[str, str]) -> int | None:
    """The process id as a number; None for the ``pid="other"`` row that folds the processes past the limit."""
    pid = labels.get("pid", "")
    return int(pid) if pid.isdigit() else None


def _labels(entity: Entity) -> dict[str, str]:
    return dict(entity.labels)


def _processes(device: DeviceView, parent: Entity) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for entity, values in device.samples.items():
        if entity.kind != "process" or dict(entity.info).get("parent") != parent.uid:
            continue
        labels = _labels(entity)
        rows.append(
            {
                "pid": _pid(labels),
                "name": labels.get("process", ""),
                "user": labels.get("user", ""),
                "memory_used_bytes": _get(values, keys.PROCESS_MEMORY_USED),
                "sm_utilization_ratio": _get(values, keys.PROCESS_SM_UTILIZATION),
                "processes": _count(values, keys.PROCESSES),
                "namespace": labels.get("namespace", ""),
                "pod": labels.get("pod", ""),
                "container": labels.get("container", ""),
                "job": labels.get("slurm_job", "") or labels.get("hpc_job", ""),
            }
        )
    rows.sort(key=lambda row: -(row["memory_used_bytes"] or 0.0))
    return rows


def _allocations(device: DeviceView, parent: Entity) -> list[str]:
    """Pods and jobs allocated to ``parent``, as ``namespace/pod/container`` or ``job 77``."""
    return [
        allocation_name(entity)
        for entity in device.samples
        if entity.kind in ("pod", "job") and dict(entity.info).get("parent") == parent.uid
    ]


def _has_clock_events(values: Mapping[str, float]) -> bool:
    return any(key in values for key in _CLOCK_EVENT_KEYS.values())


def _card(device: DeviceView, entity: Entity, values: Mapping[str, float], title: str) -> Card:
    reasons = [name for name, key in _CLOCK_EVENT_KEYS.items() if values.get(key, 0.0) > 0]
    card: Card = {
        "kind": entity.kind,
        "uid": entity.uid,
        "index": device.identity.index,
        "uuid": device.identity.uuid,
        "title": title,
        "name": device.identity.name,
        "state": "lost" if not device.up else "stalled" if device.stalled else "up",
        "labels": _labels(entity),
        "utilization_ratio": _get(values, keys.UTILIZATION),
        "memory_used_bytes": _get(values, keys.MEMORY_USED),
        "memory_total_bytes": _get(values, keys.MEMORY_TOTAL),
        "temperature_celsius": _get(values, keys.TEMPERATURE),
        "temperature_slowdown_celsius": _get(values, keys.TEMPERATURE_SLOWDOWN),
        "power_watts": _get(values, keys.POWER),
        "power_limit_watts": _get(values, keys.POWER_LIMIT),
        "sm_clock_hertz": _get(values, keys.SM_CLOCK),
        "sm_clock_max_hertz": _get(values, keys.SM_CLOCK_MAX),
        "memory_clock_hertz": _get(values, keys.MEMORY_CLOCK),
        "memory_clock_max_hertz": _get(values, keys.MEMORY_CLOCK_MAX),
        "pcie_generation": _count(values, keys.PCIE_GENERATION),
        "pcie_generation_max": _count(values, keys.PCIE_GENERATION_MAX),
        "pcie_width": _count(values, keys.PCIE_WIDTH),
        "pcie_width_max": _count(values, keys.PCIE_WIDTH_MAX),
        # None (unknown) where no clock-event value was read (a lost GPU, an unsupported call): not "none"
        "clock_events": [REASON_WORDS.get(name, name) for name in reasons] if _has_clock_events(values) else None,
        "throttled": [REASON_WORDS.get(name, name) for name in reasons if name in THROTTLES],
        "ecc_enabled": _get(values, keys.ECC_MODE),
        "ecc_uncorrected_volatile": _count(values, _ECC_UNCORRECTED_VOLATILE),
        "ecc_corrected_volatile": _count(values, _ECC_CORRECTED_VOLATILE),
        "row_remap_pending": _get(values, keys.ROW_REMAP_PENDING),
        "row_remap_failed": _get(values, keys.ROW_REMAP_FAILED),
        "processes": _processes(device, entity),
        "allocations": _allocations(device, entity),
        # what each allocation used since the exporter started (the ledger), and on a GPU what no one did
        "usage": usage(device, entity),
        "unattributed": unattributed(values) if entity.kind == "gpu" else None,
        "xid": None,
        "health": None,  # the health model's judgement of a GPU (never of a MIG instance)
        # the values the vendor does not support on this GPU (absent from /metrics, not 0), by family
        "unsupported": list(device.unsupported) if entity.kind == "gpu" else [],
    }
    return card


def _problems(card: Card) -> list[str]:
    problems: list[str] = []
    if card["state"] == "lost":
        problems.append("lost: the GPU stopped answering")
    elif card["state"] == "stalled":
        problems.append("stalled: its last read has not returned")
    temp, slowdown = card["temperature_celsius"], card["temperature_slowdown_celsius"]
    if temp is not None and slowdown is not None and temp >= slowdown - HOT_MARGIN_CELSIUS:
        problems.append(f"hot: {temp:g} °C, slowdown at {slowdown:g} °C")
    if card["throttled"]:
        problems.append("throttled: " + ", ".join(card["throttled"]))
    low_sm = busy_low_sm(card)
    if low_sm:
        problems.append(low_sm)
    width, width_max = card["pcie_width"], card["pcie_width_max"]
    if width is not None and width_max is not None and width < width_max:
        problems.append(f"degraded PCIe link: x{width:g} of x{width_max:g}")
    gen, gen_max, util = card["pcie_generation"], card["pcie_generation_max"], card["utilization_ratio"]
    if gen is not None and gen_max is not None and gen < gen_max and util is not None and util >= 0.5:
        problems.append(f"degraded PCIe link: Gen{gen:g} of Gen{gen_max:g} while busy")
    if card["ecc_uncorrected_volatile"]:
        problems.append(f"uncorrected ECC errors: {card['ecc_uncorrected_volatile']:g} since the driver loaded")
    if card["row_remap_pending"]:
        problems.append("row remapping pending: reset the GPU")
    if card["row_remap_failed"]:
        problems.append("row remapping failed: replace the GPU")
    health = card.get("health")
    if health and health["status"] != "pass":
        problems.append(f"health {health['status']}: {health['reason']}; action: {health['action']}")
    xid = card["xid"]
    if xid and xid["total"]:
        last = xid["last"]
        problems.append(f"Xid {last}: {xid['description']}" if last is not None else f"{xid['total']} Xid errors")
    return problems


def _xid(tally: XidTally | None) -> dict[str, Any]:
    """A GPU's Xid state from the pipeline's tally: counts by code, the last Xid, its Unix time."""
    counts = {code: n for code, n in (tally.xid if tally else {}).items() if n > 0}
    last_code = tally.last_xid if tally else None
    known = XID_CODES.get(last_code) if last_code is not None else None
    return {
        "total": sum(counts.values()),
        "counts": {str(code): n for code, n in sorted(counts.items())},
        "last": last_code,
        "last_at": tally.last_xid_at if tally else None,
        "description": known.description if known else ("not in the Xid table" if last_code is not None else ""),
    }


def card_entities(snapshot: Snapshot) -> Iterator[tuple[DeviceView, Entity, Mapping[str, float]]]:
    """What becomes a card, in card order: each GPU, followed by each MIG instance of it."""
    for device in snapshot.devices:
        yield device, device.entity, device.values
        for entity, values in device.samples.items():
            if entity.kind == "mig":
                yield device, entity, values


def trail_values(snapshot: Snapshot) -> Iterator[tuple[str, tuple[float | None, ...]]]:
    """Each card's uid and its :data:`TRAIL` values, without building the cards: the history records
    every second, and whole cards (processes, Xid state) cost about 10 ms of each second at 64 GPUs."""
    for _device, entity, values in card_entities(snapshot):
        yield entity.uid, tuple(_get(values, key) for key in TRAIL.values())


def cards(snapshot: Snapshot) -> list[Card]:
    """One card per GPU, followed by one per MIG instance of it."""
    events = snapshot.events
    judged = {gpu.uuid: gpu for gpu in snapshot.health.gpus} if snapshot.health.known else {}
    out: list[Card] = []
    for device, entity, values in card_entities(snapshot):
        if entity.kind != "mig":
            card = _card(device, entity, values, f"GPU {device.identity.index}")
            if events is not None:
                card["xid"] = _xid(events.get(device.identity.uuid))
            gpu = judged.get(device.identity.uuid)
            card["health"] = gpu_health(gpu) if gpu is not None else None
        else:
            labels = _labels(entity)
            title = (
                f"GPU {device.identity.index} MIG {labels.get('profile', '')} "
                f"(GI {labels.get('gpu_instance', '')}, CI {labels.get('compute_instance', '')})"
            )
            card = _card(device, entity, values, title)
            card["name"] = dict(entity.info).get("name", "") or device.identity.name
            card["mig_uuid"] = dict(entity.info).get("mig_uuid", "")
        card.update(activity(values, device.identity, snapshot.stats))
        card["problems"] = _problems(card)
        out.append(card)
    return out


def paused_text(status: dict[str, Any]) -> str:
    """What a pause asked of the exporter means, in words (empty without one)."""
    pause = status.get("paused")
    if not pause:
        return ""
    what = (
        "the GPU library is released (no GPU is read)"
        if pause["scope"] == "full"
        else "profiling counters released (no SM activity, occupancy, tensor or DRAM values)"
    )
    return f"PAUSED on request until {pause['until']} ({pause['source']}): {what}; gpu-exporter resume ends it now"


def status(
    snapshot: Snapshot,
    hostname: str,
    age_seconds: float | None = None,
    trail: Callable[[str], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole host: exporter and driver, then the cards, each with its recent ``history``."""
    stats = snapshot.stats
    gpus = cards(snapshot)
    for card in gpus:
        card["history"] = dict(trail(card["uid"])) if trail else {}
    problems = sum(1 for card in gpus if card["problems"])
    return {
        "hostname": hostname,
        "version": stats.version,
        "backend": stats.backend,
        "backend_up": stats.backend_up,
        "backend_reason": stats.backend_reason,  # a word, as gpu_exporter_backend_info{reason} has it
        # why the backend is down in words, with the fix ("library_not_found" is "libnvidia-ml.so.1 not found: ...")
        "backend_problem": stats.backend_problem or None,
        # --simulate: what is simulated (no GPU is read), else None
        "simulated": stats.backend_reason.removeprefix(SIMULATED)
        if stats.backend_reason.startswith(SIMULATED)
        else None,
        "driver_version": snapshot.host.driver_version or None,
        "cuda_version": snapshot.host.cuda_version or None,
        "interval_seconds": stats.interval_seconds,
        "snapshot_age_seconds": age_seconds,
        "cards_with_problems": problems,
        "health": node_health(snapshot.health),
        # a pause asked of the exporter (gpu-exporter pause): its scope, end (UTC) and asker, else None
        "paused": None
        if stats.pause is None
        else {
            "scope": stats.pause.scope,
            "until": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stats.pause.until_wall)),
            "source": stats.pause.source,
        },
        "gpus": gpus,
    }
