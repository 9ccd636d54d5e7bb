"""Every DCGM device field is either served in dcgm-exporter mode or has a stated reason why not."""

from __future__ import annotations

from gpu_exporter.catalogue import METRICS
from gpu_exporter.compat_fields import COMPOSED, DOUBLE_IDS, NOT_SERVED, not_served_reason
from gpu_exporter.dcgm_fields import FIELD_IDS

#: Identity fields served as dcgm-exporter label fields (compat.py's label table).
LABEL_FIELDS = {1, 2, 50, 53, 54, 55, 57, 85}
#: The last Xid (DCGM_FI_DEV_XID_ERRORS), served from the xid collector's events.
XID_FIELD = 230


def _served() -> set[int]:
    return (
        {FIELD_IDS[spec.compat_name] for spec in METRICS if spec.compat_name}
        | set(COMPOSED)
        | LABEL_FIELDS
        | {XID_FIELD}
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
