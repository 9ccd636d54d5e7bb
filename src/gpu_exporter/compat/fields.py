"""dcgm-exporter fields beyond one catalogue row each: the DCGM fields composed from several rows,
the identity fields read at discovery (values, label fields, the P2P status names), and, for every
other DCGM_FI_DEV_* field gpu-exporter does not serve, why not.

A *composed* field is a sum over catalogue rows of one GPU: DCGM field 112 (the clock-event reason
bitmask) is Σ bit × ``gpu_clock_event_active{reason}``; the NVLink error totals (409, 419, 429, 439)
add ``gpu_nvlink_errors_total{type}`` over the GPU's links, and the per-link fields (410-415, …)
take one link's. Both backends compose them the same way, so their dcgm-exporter output matches.
The NVLink5 counters (1200-1214, 1219, 1404-1419) add the per-link ``gpu_nvlink_port_*`` rows, as
DCGM's GPU value is NVML's aggregate over the links (NVML backend only). The NVLink bandwidth fields
(449, 440-448, 475-480, 494-496) are DCGM's own rate between two samples: :class:`NvlinkBandwidth`
keeps the previous counters per GPU and link to compute them on NVML (the DCGM backend does not serve
them yet: DCGM computes 449 itself, but the DCGM backend watches catalogue fields only).
:data:`LINK_ENTITY_FIELDS` (1525-1528) and 1529 are DCGM link-entity fields, one series per NVLink.
DCGM 4.x's base-unit fields (1600-1612, :data:`BASE_UNIT_TWINS`) are one row each, in the row's unit.

:data:`NOT_SERVED` covers the rest of DCGM's device fields by id range, each with its reason; a test
checks that every DCGM_FI_DEV_* id is served or has one, and the README's list is built from both.

The field ids here are DCGM's facts, as are the names of :mod:`.field_names`; the catalogue rows a
field is composed from are named through :mod:`gpu_exporter.catalogue.keys` and
:func:`~gpu_exporter.catalogue.key_of`, never spelled here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import CLOCK_EVENT_REASONS, NVLINK_ERROR_FIELDS, key_of, keys
from gpu_exporter.catalogue.links import NVLINK5_COUNTERS
from gpu_exporter.model import Entity

#: Fields DCGM types as doubles (watts, the used-memory ratio, profiling ratios, power smoothing's
#: ceiling, floors, percents and ramp rates); every other exported field is an INT64 in DCGM, so its
#: value is truncated to a whole number (framebuffer and BAR1 in whole MiB, as DCGM divides bytes by
#: 2^20; clocks in whole MHz; power smoothing's hysteresis in whole ms).
DOUBLE_IDS = frozenset(
    {155, 157, 160, 161, 162, 163, 164, 254, *range(1001, 1009), *range(1013, 1035), *range(1428, 1433), 1434, 1435,
     1436, 1439, 1440, 1441, 1612, 1216, 1218, *range(1613, 1617)}
)  # fmt: skip
#: NVLink error type → DCGM's GPU-wide total field (the sum over every link).
NVLINK_TOTAL_FIELDS: dict[str, int] = {"crc_flit": 409, "crc_data": 419, "replay": 429, "recovery": 439}


@dataclass(frozen=True)
class Composed:
    """A DCGM field computed from catalogue rows: Σ weight × value over ``parts`` (row key, weight),
    read from the GPU itself, or from its NVLinks (``links``: every link when ``link`` is None, else
    that link only), rounded to a whole number when ``whole``. Absent when none of the parts has a value."""

    parts: tuple[tuple[str, int], ...]
    describe: str
    links: bool = False
    link: int | None = None
    whole: bool = False  # round to a whole number (nanoseconds from seconds: DCGM's INT64)
    truncate: bool = False  # drop the fraction, as an INT64 from a finer unit (joules from millijoules)

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(key for key, _weight in self.parts)

    def value(self, samples: Mapping[Entity, Mapping[str, float]], gpu: Entity) -> float | None:
        """The composed value of GPU ``gpu`` from one cycle's samples of it and its links."""
        if not self.links:
            sources = [samples.get(gpu, {})]
        else:
            sources = [
                values
                for entity, values in samples.items()
                if entity.kind == "nvlink"
                and entity.uid.startswith(gpu.uid + "/")
                and (self.link is None or dict(entity.labels).get("nvlink") == str(self.link))
            ]
        found = [values[key] * weight for values in sources for key, weight in self.parts if key in values]
        if not found:
            return None
        if self.truncate:
            return float(math.trunc(sum(found)))
        return float(round(sum(found))) if self.whole else float(sum(found))


def _composed() -> dict[int, Composed]:
    out = {
        112: Composed(
            tuple((key_of(keys.CLOCK_EVENT_ACTIVE, (("reason", reason),)), bit) for reason, bit in CLOCK_EVENT_REASONS),
            "Σ bit × `gpu_clock_event_active{reason}`",
        )
    }
    # DCGM 1420-1422: NVML's clock-event duration fields for SW power cap, sync boost and SW thermal
    # slowdown are the perf-policy violation counters (nvml.h maps NVML_PERF_POLICY_POWER, _SYNC_BOOST
    # and _THERMAL onto them), so they are gpu_clock_throttle_seconds_total in nanoseconds.
    for number, reason in ((1420, "power"), (1421, "sync_boost"), (1422, "thermal")):
        key = key_of(keys.CLOCK_THROTTLE, (("reason", reason),))
        out[number] = Composed(((key, 10**9),), f"`{key}` × 10⁹ (ns), rounded", whole=True)
    for kind, ids in NVLINK_ERROR_FIELDS:
        key = key_of(keys.NVLINK_ERRORS, (("type", kind),))
        out[NVLINK_TOTAL_FIELDS[kind]] = Composed(((key, 1),), f"Σ over links of `{key}`", links=True)
        for link, number in enumerate(ids):
            out[number] = Composed(((key, 1),), f"`{key}` of link {link}", links=True, link=link)
    # DCGM 498, 499: DCGM asks NVML fields 162 and 161 (DL recovery, DL replay) with scopeId 0, i.e.
    # link 0's counters, the ones nvmlDeviceGetNvLinkErrorCounter reads (NVML: not on Blackwell and later).
    for number, kind in ((498, "recovery"), (499, "replay")):
        key = key_of(keys.NVLINK_ERRORS, (("type", kind),))
        out[number] = Composed(((key, 1),), f"`{key}` of link 0 (DCGM asks scopeId 0)", links=True, link=0)
    # DCGM 1200-1214, 1219, 1404-1419: on NVLink5 DCGM asks NVML for the sum over the links (scopeId UINT_MAX).
    for name, variant, _selector, number, _text in NVLINK5_COUNTERS:
        key = key_of(name, variant)
        out[number] = Composed(((key, 1),), f"Σ over links of `{key}`", links=True)
    # DCGM 1040-1075: per-link NVLink bytes/s from GPM (DCGM's GPM manager: NVML_GPM_METRIC_NVLINK_L<n>_TX/RX_PER_SEC
    # × 2^20), INT64, one GPU series per link field.
    for link in range(18):
        for number, key in ((1040 + 2 * link, LINK_GPM_TX), (1041 + 2 * link, LINK_GPM_RX)):
            out[number] = Composed(((key, 1),), f"`{key}` of link {link}", links=True, link=link, whole=True)
    # DCGM 1600-1612 (DCGM 4.x's base-unit twins of legacy fields, in their legacy order): the same
    # reading in bytes, hertz, joules and a 0-1 ratio, which are the catalogue rows' own units.
    # INT64 except the fan ratio (a double); DCGM's joules are whole, the fraction dropped.
    for number, (key, truncate) in enumerate(BASE_UNIT_TWINS, start=1600):
        how = f"`{key}`" + (", fraction dropped" if truncate else "")
        out[number] = Composed(((key, 1),), how, whole=number not in DOUBLE_IDS, truncate=truncate)
    # DCGM 4.7's base-unit fields 1613-1616, 1625-1628 (:data:`.field_names.BASE_UNIT_NAMES`): the legacy
    # field's catalogue row in its own unit, a 0-1 ratio as a double, bytes whole (INT64).
    for number, key in BASE_UNIT_NAMED.items():
        out[number] = Composed(((key, 1),), f"`{key}` (DCGM 4.7 name)", whole=number not in DOUBLE_IDS)
    return out


#: DCGM 4.7's base-unit fields → the catalogue row each is read from (1613-1616, the ratios, are doubles in
#: :data:`DOUBLE_IDS`, DCGM_FT_DOUBLE; the byte counts 1625-1628 whole, DCGM_FT_INT64).
BASE_UNIT_NAMED: dict[int, str] = {
    1613: keys.UTILIZATION,
    1614: keys.MEMORY_COPY_UTILIZATION,
    1615: keys.ENCODER_UTILIZATION,
    1616: keys.DECODER_UTILIZATION,
    1625: keys.MEMORY_TOTAL,
    1626: keys.MEMORY_FREE,
    1627: keys.MEMORY_USED,
    1628: keys.MEMORY_RESERVED,
}
#: Base-unit names of framebuffer fields: a GPU instance's own memory, as the legacy framebuffer fields.
INSTANCE_OWN = frozenset({1625, 1626, 1627, 1628})


#: DCGM 1600-1612 in id order: the catalogue row each is read from, and whether its fraction is dropped.
BASE_UNIT_TWINS: tuple[tuple[str, bool], ...] = (
    (keys.BAR1_TOTAL, False),  # 1600 DCGM_FI_DEV_BAR1_CAPACITY_BYTES (legacy 90, MiB)
    (keys.BAR1_USED, False),  # 1601 (92)
    (keys.BAR1_FREE, False),  # 1602 (93)
    (keys.SM_CLOCK, False),  # 1603 DCGM_FI_DEV_SM_CLOCK_HERTZ (legacy 100, MHz)
    (keys.MEMORY_CLOCK, False),  # 1604 (101)
    (keys.VIDEO_CLOCK, False),  # 1605 (102)
    (keys.SM_CLOCK_APPLICATION, False),  # 1606 (110)
    (keys.MEMORY_CLOCK_APPLICATION, False),  # 1607 (111)
    (keys.SM_CLOCK_MAX, False),  # 1608 (113)
    (keys.MEMORY_CLOCK_MAX, False),  # 1609 (114)
    (keys.VIDEO_CLOCK_MAX, False),  # 1610 (115)
    (keys.ENERGY, True),  # 1611 DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL (legacy 156, mJ)
    (keys.FAN_SPEED, False),  # 1612 DCGM_FI_DEV_FAN_SPEED_RATIO (legacy 191, %), a double
)


#: The per-link GPM rows (NVML backend) behind DCGM 1040-1075 and the link-entity fields 1532, 1533.
LINK_GPM_TX, LINK_GPM_RX = keys.NVLINK_LINK_TRANSMIT_RATE, keys.NVLINK_LINK_RECEIVE_RATE
#: DCGM field id → how it is composed from catalogue rows.
COMPOSED: dict[int, Composed] = _composed()


def _capability(dev: DeviceIdentity) -> int | None:
    """DCGM's packing of the CUDA compute capability (DCGM_FI_CUDA_GPU_COMPUTE_CAPABILITY, 63):
    major << 16 | minor, as DCGM's cache manager stores nvmlDeviceGetCudaComputeCapability's pair."""
    return None if dev.compute_capability is None else dev.compute_capability[0] << 16 | dev.compute_capability[1]


def _placement(position: int) -> Callable[[DeviceIdentity], int | None]:
    """DCGM 573-577: one number of the GPU's platform placement (slot, tray, host id, peer type, module id)."""
    return lambda dev: None if dev.placement is None else dev.placement[position]


def _p2p_bitmap(dev: DeviceIdentity) -> int | None:
    """DCGM field 64 (DCGM_FI_DEV_NVLINK_P2P_STATUS): bit g set when the NVLink P2P status towards GPU
    g is OK, as DCGM builds it from nvmlDeviceGetP2PStatus(NVML_P2P_CAPS_INDEX_NVLINK)."""
    return sum(1 << peer for peer, status in dev.p2p_nvlink if status == 0) if dev.p2p_nvlink else None


#: Identity fields (read once at discovery, :class:`DeviceIdentity`) that DCGM types INT64, served as
#: values, or as label fields printed in decimal as dcgm-exporter prints an integer label; and where
#: each comes from, for the README's field list.
IDENTITY_SOURCES: dict[int, str] = {
    52: "the NVML index (the `gpu` label)",
    58: "NVML nvmlDeviceGetPciInfo pciDeviceId",
    59: "NVML nvmlDeviceGetPciInfo pciSubSystemId",
    63: "NVML nvmlDeviceGetCudaComputeCapability, major << 16 \\| minor",
    64: "P2P status over NVLink towards each GPU (NVML nvmlDeviceGetP2PStatus): bit g set when OK",
    69: "NVML nvmlDeviceGetMaxMigDeviceCount while MIG is on, 0 while it is off",
    74: "NVML nvmlSystemGetConfComputeState ccFeature (the system's confidential-compute feature: 0 off, 1 on; "
    "0 where NVML says not supported)",
    94: "NVML nvmlGpmQueryDeviceSupport isSupportedDevice: 1 or 0 (0 also where NVML says not supported)",
    **{
        number: f"NVML nvmlDeviceGetPlatformInfo {member}"
        for number, member in zip(
            range(573, 578), ("slotNumber", "trayIndex", "hostId", "peerType", "moduleId"), strict=True
        )
    },
}
#: Host-wide fields DCGM answers for every GPU: the number of GPUs (DCGM_FI_DEV_COUNT, alias
#: DCGM_FI_SYSTEM_GPU_QUANTITY, 4: DCGM's count of the GPUs it sees, here those the backend discovered)
#: and the CUDA driver version (DCGM_FI_CUDA_DRIVER_VERSION, 5: nvmlSystemGetCudaDriverVersion's number,
#: major × 1000 + minor × 10, as DCGM stores it); value(host, GPU count), None where unknown.
HOST_VALUES: dict[int, Callable[[HostIdentity, int], int | None]] = {
    4: lambda _host, count: count,
    5: lambda host, _count: _cuda_number(host.cuda_version),
}
HOST_SOURCES: dict[int, str] = {
    4: "the number of GPUs the backend discovered (DCGM's own count of the GPUs it sees)",
    5: "NVML nvmlSystemGetCudaDriverVersion (DCGM: major × 1000 + minor × 10)",
}


def _cuda_number(version: str) -> int | None:
    """``"12.4"`` → 12040, NVML's and DCGM's number; None for an empty or malformed version."""
    major, _, minor = version.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major) * 1000 + int(minor) * 10


IDENTITY_VALUES: dict[int, Callable[[DeviceIdentity], int | None]] = {  # DCGM field id → value
    52: lambda dev: dev.index,
    58: lambda dev: dev.pci_device_id,
    59: lambda dev: dev.pci_subsystem_id,
    63: _capability,
    64: _p2p_bitmap,
    69: lambda dev: dev.mig_max_slices,
    74: lambda dev: dev.cc_mode,
    94: lambda dev: None if dev.gpm_supported is None else int(dev.gpm_supported),
    **{number: _placement(number - 573) for number in range(573, 578)},
}


def decimal_label(value: Callable[[DeviceIdentity], int | None]) -> Callable[[HostIdentity, DeviceIdentity], str]:
    """An integer identity field as a label field's value: decimal, as dcgm-exporter prints an INT64."""

    def label(_host: HostIdentity, dev: DeviceIdentity) -> str:
        number = value(dev)
        return "" if number is None else str(number)

    return label


#: DCGM field 254 (DCGM_FI_DEV_FB_USED_RATIO, also named DCGM_FI_DEV_FB_USED_PERCENT), computed as DCGM's
#: cache manager does: used / (total - reserved) of the memory info, a double in 0-1 (not percent).
FB_USED_RATIO = 254
FB_USED_RATIO_KEYS = frozenset({keys.MEMORY_USED, keys.MEMORY_TOTAL})


def fb_used_ratio(values: Mapping[str, float]) -> float | None:
    """Framebuffer used ÷ (total − reserved) of one GPU or MIG instance; None without used and total
    or when nothing is left after the reserved part (DCGM: no data). Reserved counts 0 where unread."""
    used, total = values.get(keys.MEMORY_USED), values.get(keys.MEMORY_TOTAL)
    usable = None if total is None else total - values.get(keys.MEMORY_RESERVED, 0.0)
    if used is None or not usable:
        return None
    return used / usable


#: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, and link n's DCGM_FI_DEV_NVLINK_BANDWIDTH_Ln field.
BANDWIDTH_TOTAL = 449
BANDWIDTH_LINKS: tuple[int, ...] = (*range(440, 446), *range(475, 481), *range(446, 449), *range(494, 497))
#: Bandwidth field id → its link (None: every link).
BANDWIDTH_FIELDS: dict[int, int | None] = {BANDWIDTH_TOTAL: None}
BANDWIDTH_FIELDS.update({n: link for link, n in enumerate(BANDWIDTH_LINKS)})
#: DCGM 4.7's NVLink throughput in bytes per second: 1648 (DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND, every
#: link), 1630 + n (DCGM_FI_DEV_NVLINK_THROUGHPUT_L<n>_BYTES_PER_SECOND, link n); INT64, the same KiB/s rate
#: as 449 and its per-link fields but × 1024 where those are ÷ 1000 (NVIDIA's Field Identifiers page for
#: DCGM 4.7.0, as a third-party guide quotes it: jackliusr/research, nvidia_dcgm_guide, §4.2).
BYTES_PER_SECOND_TOTAL = 1648
BYTES_PER_SECOND_FIELDS: dict[int, int | None] = {BYTES_PER_SECOND_TOTAL: None}
BYTES_PER_SECOND_FIELDS.update({1630 + link: link for link in range(18)})
#: Every field :class:`NvlinkBandwidth` computes (MB/s and bytes/s), field id → its link (None: every link).
RATE_FIELDS: dict[int, int | None] = {**BANDWIDTH_FIELDS, **BYTES_PER_SECOND_FIELDS}
BANDWIDTH_KEYS = (keys.NVLINK_TRANSMIT_BYTES, keys.NVLINK_RECEIVE_BYTES)
BANDWIDTH_SOURCE = (
    "Δ(RX + TX KiB of `gpu_nvlink_receive_bytes_total`, `gpu_nvlink_transmit_bytes_total`) ÷ seconds "
    "between samples ÷ 1000, truncated, 0 at the first sample (DCGM's ReadAndCacheNvLinkBandwidth)"
)


class NvlinkBandwidth:
    """DCGM's NVLink bandwidth fields (449 for all links, 440-448, 475-480, 494-496 per link) as DCGM
    4.x computes them at each of its samples: (RX + TX now − RX + TX at the previous sample, in KiB
    of NVML's NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX/TX) ÷ seconds between the samples ÷ 1000,
    truncated to an integer; 0 at the first sample and after a counter reset (never negative). DCGM
    4.7's bytes-per-second twins (1648, 1630-1647) take the same KiB/s rate × 1024, truncated.

    State: per (GPU uuid, link or None) the previous KiB total, its time and the KiB/s rate computed;
    updated once per frame (:meth:`update`), read by every render of that frame (:meth:`value`)."""

    def __init__(self) -> None:
        # (GPU uuid, link or None, direction: "" RX + TX, "tx", "rx") → (KiB, time, KiB/s)
        self._state: dict[tuple[str, int | None, str], tuple[float, float, float]] = {}
        self._linkless: set[str] = set()  # GPUs read with no NVLink counter: DCGM's sum over no link is 0

    def update(self, uuid: str, gpu: Entity, samples: Mapping[Entity, Mapping[str, float]], now: float) -> None:
        """Fold one frame's NVLink counters of GPU ``gpu`` (bytes) taken at Unix time ``now``: RX + TX
        per link and over the links, and per link each direction alone (DCGM 1530, 1531)."""
        totals: dict[tuple[int | None, str], float] = {}
        for entity, values in samples.items():
            if entity.kind != "nvlink" or not entity.uid.startswith(gpu.uid + "/"):
                continue
            found = [values[key] for key in BANDWIDTH_KEYS if key in values]
            if not found:
                continue
            kib = sum(found) / 1024  # NVML's unit
            link = int(dict(entity.labels)["nvlink"])
            totals[(link, "")] = kib
            totals[(None, "")] = totals.get((None, ""), 0.0) + kib
            for direction, row in zip(("tx", "rx"), BANDWIDTH_KEYS, strict=True):
                if row in values:
                    totals[(link, direction)] = values[row] / 1024
        if totals:
            self._linkless.discard(uuid)
        else:
            self._linkless.add(uuid)
        for (which, direction), kib in totals.items():
            previous = self._state.get((uuid, which, direction))
            if previous is None:
                value = 0.0
            elif now <= previous[1]:  # the same sample again: keep its value
                continue
            else:
                delta = kib - previous[0]
                value = 0.0 if delta < 0 else delta / (now - previous[1])
            self._state[(uuid, which, direction)] = (kib, now, value)
        for key in [key for key in self._state if key[0] == uuid and key[1:] not in totals]:
            del self._state[key]  # a link (or the whole GPU's links) no longer read: start over

    def value(self, uuid: str, link: int | None, direction: str = "", per_byte: bool = False) -> float | None:
        """The last computed value of GPU ``uuid``'s link (None: every link), RX + TX or one direction
        (``"tx"``, ``"rx"``), in DCGM's MB/s (KiB/s ÷ 1000) or, ``per_byte``, its bytes/s (KiB/s × 1024),
        truncated; None when unread. The sum over every link of a GPU without NVLink counters is 0, as
        DCGM serves it (dcgm-exporter's default counters list it for every GPU)."""
        if link is None and not direction and uuid in self._linkless:
            return 0.0
        state = self._state.get((uuid, link, direction))
        if state is None:
            return None
        return float(int(state[2] * 1024 if per_byte else state[2] / 1000))


#: DCGM link-entity fields (DCGM_FE_LINK) served per NVLink of a GPU: DCGM reads 1525-1528 with
#: nvmlDeviceGetNvLinkErrorCounter for the link, i.e. one ``gpu_nvlink_errors_total{type}`` row each.
LINK_ENTITY_FIELDS: dict[int, str] = {
    number: key_of(keys.NVLINK_ERRORS, (("type", kind),))
    for number, kind in ((1525, "crc_flit"), (1526, "crc_data"), (1527, "replay"), (1528, "recovery"))
}
#: DCGM 1508 (DCGM_FI_DEV_NVLINK_GET_STATE, a link entity's): NVML field 165's raw state 0-3, as DCGM stores it.
LINK_ENTITY_FIELDS[1508] = keys.NVLINK_STATE
#: DCGM 1509 (DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT, a link entity's): PRM counter 201 of the link's port.
LINK_ENTITY_FIELDS[1509] = keys.NVLINK_PORT_TRANSMIT_WAIT
#: DCGM 1532, 1533 (DCGM_FI_PROF_NVLINK_TX/RX_BYTES_PER_LINK, a link entity's): the link's GPM rate, bytes/s.
LINK_ENTITY_FIELDS[1532], LINK_ENTITY_FIELDS[1533] = LINK_GPM_TX, LINK_GPM_RX
#: DCGM_FI_DEV_NVLINK_THROUGHPUT_PER_LINK: the link's bandwidth, as DCGM's per-link 440-448, 475-480, 494-496.
LINK_BANDWIDTH = 1529
#: The link-entity bandwidth fields → the direction they count ("": RX + TX, 1529; 1530 TX only; 1531 RX
#: only), each computed as 1529 is from that direction's counter alone (KiB delta ÷ seconds ÷ 1000).
LINK_BANDWIDTHS: dict[int, str] = {LINK_BANDWIDTH: "", 1530: "tx", 1531: "rx"}
#: DCGM 1215, 1217: NVML's encoded NVLink5 bit error rates as DCGM stores them (INT64), i.e. the raw value
#: NVML answered for these rows (their value is the decoded ratio, DCGM's 1216 and 1218).
ENCODED_FIELDS: dict[int, str] = {
    1215: keys.NVLINK_SYMBOL_BER,
    1217: keys.NVLINK_EFFECTIVE_BER,
}
#: Label fields DCGM serves for any entity (DCGM_FE_NONE: the driver and NVML versions), so dcgm-exporter's
#: link collector has them; every other label field is a GPU's, which it does not ask for a link.
LINK_LABEL_FIELDS = frozenset({1, 2})


def link_entities(samples: Mapping[Entity, Mapping[str, float]], gpu: Entity) -> list[tuple[int, Entity]]:
    """The NVLinks of ``gpu`` that are up (``gpu_nvlink_up`` 1), by link number: dcgm-exporter watches
    a GPU's links whose DCGM link state is up, and no other."""
    return sorted(
        (int(dict(entity.labels)["nvlink"]), entity)
        for entity, values in samples.items()
        if entity.kind == "nvlink" and entity.uid.startswith(gpu.uid + "/") and values.get(keys.NVLINK_UP) == 1
    )


#: dcgm-exporter's link_status names of nvmlGpuP2PStatus_t 0-6 (DCGM's enum mirrors NVML's).
P2P_STATUS_NAMES = ("OK", "ChipsetNotSupported", "GPUNotSupported", "TopologyNotSupported", "DisabledByRegKey",
                    "NotSupported", "Unknown")  # fmt: skip

#: DCGM device fields gpu-exporter does not serve, by inclusive id range, with the reason. Ranges may
#: hold served ids too (a served id wins); ids DCGM does not define are skipped.
NOT_SERVED: tuple[tuple[int, int, str], ...] = (
    (60, 62, "topology between GPUs and CPUs, not a per-GPU sample"),
    (68, 68, "CUDA_VISIBLE_DEVICES: text that DCGM composes for the GPU, not a number NVML reports"),
    (70, 73, "CPU affinity: four 64-bit words of nvmlDeviceGetCpuAffinity's CPU bitmask, topology rather than a "
     "sample (which CPUs are near the GPU), with no NVML field id"),
    (75, 77, "MIG attributes and GPU/compute instance records: binary structs (DCGM blobs), not numbers"),
    (86, 89, "memory affinity bitmasks, not per-GPU samples"),
    (91, 91, "sync-boost groups are a DCGM configuration, not an NVML value"),
    (120, 130, "the supported-clocks list (130): a record of clock pairs, not a number"),
    (165, 175, "power profile masks (165-167): DCGM types them as binary blobs (arrays of 32-bit masks, "
     "NVML's nvmlMask255_t), not numbers, so dcgm-exporter cannot export them either; the fabric error code "
     "(171: DCGM's return code translated from NVML's status) and cluster UUID (172, text): not served, "
     "gpu_fabric_state 4 says completed with an error"),
    (205, 205, "per-process accounting records, not a sample"),
    (347, 363, "DCGM diagnostic results, which NVML does not run"),
    (450, 450, "DCGM never stores a value in it: its event thread subscribes to Xid and MIG events only (NVML "
     "has no NVLink error event), so dcgm-exporter finds it blank"),
    (497, 497, "link 0's DL CRC count (NVML field 163, which DCGM asks with scopeId 0): NVML does not say whether "
     "it counts flit or data CRC errors, which gpu_nvlink_errors_total{type=crc_flit|crc_data} keep apart"),
    (501, 525, "vGPU host fields (per vGPU type or instance), for hypervisors"),
    (527, 534, "more vGPU host fields, for hypervisors (526 between them, the GPU's vGPU licence, is served)"),
    (580, 699, "NVLink port counters DCGM reads below NVML, and DCGM-internal ids"),
    (700, 897, "NVSwitch fields (the nvswitch collector on the DCGM backend) and NVLink throughput rates "
     "DCGM computes"),
    (1000, 1099, "profiling (DCP) metrics not listed as served: neither DCGM's profiling rows nor NVML's GPM "
     "(cache hit rates and cycle counters are not read yet)"),
    (1100, 1141, "Grace CPU fields of DCGM's CPU module"),
    (1300, 1310, "ConnectX NIC fields of DCGM"),
    (1502, 1503, "IMEX domain and daemon status: DCGM asks the IMEX daemon (nvidia-imex-ctl), not NVML, and they "
     "are the host's, not a GPU's"),
    (1524, 1524, "NVSwitch firmware version: an NVSwitch's (text), not a GPU's"),
)  # fmt: skip


def not_served_reason(number: int) -> str | None:
    """Why DCGM field ``number`` is not served (None where no range says)."""
    return next((why for low, high, why in NOT_SERVED if low <= number <= high), None)
