"""Every DCGM device field is either served in dcgm-exporter mode or has a stated reason why not."""

from __future__ import annotations

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import METRICS
from gpu_exporter.compat.field_names import FIELD_IDS
from gpu_exporter.compat.fields import (
    COMPOSED,
    DOUBLE_IDS,
    ENCODED_FIELDS,
    FB_USED_RATIO,
    HOST_VALUES,
    IDENTITY_VALUES,
    LINK_BANDWIDTH,
    LINK_BANDWIDTHS,
    LINK_ENTITY_FIELDS,
    NOT_SERVED,
    RATE_FIELDS,
    fb_used_ratio,
    not_served_reason,
)
from gpu_exporter.compat.plan import LABEL_FIELDS

#: The last Xid (DCGM_FI_DEV_XID_ERRORS), served from the xid collector's events.
XID_FIELD = 230


def _served() -> set[int]:
    return (
        {FIELD_IDS[spec.compat_name] for spec in METRICS if spec.compat_name}
        | set(COMPOSED)
        | set(RATE_FIELDS)
        | set(LABEL_FIELDS)
        | set(IDENTITY_VALUES)
        | set(HOST_VALUES)
        | set(LINK_ENTITY_FIELDS)
        | set(LINK_BANDWIDTHS)
        | set(ENCODED_FIELDS)
        | {XID_FIELD, FB_USED_RATIO, LINK_BANDWIDTH}
    )


def test_every_device_field_is_served_or_has_a_reason() -> None:
    device_ids = {number for name, number in FIELD_IDS.items() if name.startswith("DCGM_FI_DEV_")}
    served = _served()
    missing = sorted(number for number in device_ids - served if not_served_reason(number) is None)
    assert not missing, f"DCGM device fields neither served nor explained: {missing}"


def test_reasons_do_not_overlap_and_composed_fields_are_not_catalogue_rows() -> None:
    spans = sorted((low, high) for low, high, _why in NOT_SERVED)
    assert all(high >= low for low, high in spans)
    assert all(earlier[1] < later[0] for earlier, later in zip(spans, spans[1:], strict=False)), spans
    rows = {FIELD_IDS[spec.compat_name] for spec in METRICS if spec.compat_name}
    assert not rows & set(COMPOSED)


def test_integer_fields_are_whole_in_dcgm_types() -> None:
    """Watts are DCGM doubles; clocks, memory (MiB), modes and counters are INT64."""
    assert {155, 157, 160, 161, 162, 163, 164} <= DOUBLE_IDS
    assert not {90, 92, 93, 100, 102, 110, 111, 115, 250, 252, 65, 66, 67, 301, 500} & DOUBLE_IDS


def test_identity_fields_in_dcgm_encoding() -> None:
    """Compute capability as DCGM packs it (major << 16 | minor), PCI ids and the P2P bitmap as
    integers, and integer label fields printed in decimal, as dcgm-exporter prints an INT64."""
    device = DeviceIdentity(
        index=1, uuid="GPU-x", pci_device_id=0x233010DE, pci_subsystem_id=0x16C110DE,
        compute_capability=(9, 0), p2p_nvlink=((0, 0), (2, 5), (3, 0)), brand="NVIDIA",
    )  # fmt: skip
    assert IDENTITY_VALUES[63](device) == 9 << 16
    assert IDENTITY_VALUES[58](device) == 0x233010DE
    assert IDENTITY_VALUES[64](device) == 0b1001
    assert IDENTITY_VALUES[52](device) == 1
    host = HostIdentity()
    assert LABEL_FIELDS[63](host, device) == "589824"
    assert LABEL_FIELDS[51](host, device) == "NVIDIA"
    assert LABEL_FIELDS[64](host, DeviceIdentity(index=0, uuid="GPU-y")) == ""


IDENTITY_CSV = """# identity fields and the P2P pseudo-field, as an operator would list them
DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY, gauge, CUDA compute capability (major << 16 | minor).
DCGM_FI_DEV_PCI_COMBINED_ID, gauge, PCI device and vendor id.
DCGM_FI_DEV_BRAND, label, Brand.
DCGM_FI_DEV_INFOROM_IMAGE_VER, label, Inforom image version.
DCGM_EXP_P2P_STATUS, gauge, P2P status between GPUs over NVLink.
"""


def test_framebuffer_used_ratio_as_dcgm_computes_it() -> None:
    """DCGM field 254: used / (total - reserved), a double in 0-1; none without used and total, or
    when the reserved part is all of it."""
    gib = 2**30
    values = {"gpu_memory_used_bytes": 20 * gib, "gpu_memory_total_bytes": 81 * gib, "gpu_memory_reserved_bytes": gib}
    assert fb_used_ratio(values) == 0.25
    assert fb_used_ratio({"gpu_memory_used_bytes": 1.0, "gpu_memory_total_bytes": 4.0}) == 0.25  # MIG: no reserved
    assert fb_used_ratio({"gpu_memory_total_bytes": 4.0}) is None
    assert fb_used_ratio({**values, "gpu_memory_reserved_bytes": 81 * gib}) is None
    assert FB_USED_RATIO in DOUBLE_IDS
