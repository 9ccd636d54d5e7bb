"""The field-value array read from its memory gives what pynvml's attributes give, for every value type."""

from __future__ import annotations

import pynvml

from gpu_exporter.backends.nvml import field_memory
from gpu_exporter.backends.nvml.readers import field_value

CASES = (
    (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 41.625),
    (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 4_000_000_000),
    (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", 2**63 + 5),
    (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**64 - 1),
    (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -(2**40)),
    (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -7),
    (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 65535),
    (99, "ullVal", 123456789),  # an unknown type is read as unsigned long long, both ways
)


def test_layout_is_the_one_read() -> None:
    assert field_memory.LAYOUT_MATCHES


def test_every_value_type_decodes_as_pynvml_does() -> None:
    values = (pynvml.c_nvmlFieldValue_t * (len(CASES) + 1))()
    for entry, (value_type, member, value) in zip(values, CASES, strict=False):
        entry.fieldId, entry.scopeId, entry.valueType, entry.nvmlReturn = 150, 3, value_type, pynvml.NVML_SUCCESS
        setattr(entry.value, member, value)
    values[len(CASES)].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    got = list(field_memory.decoded(values))
    assert got[:-1] == [(pynvml.NVML_SUCCESS, field_value(entry)) for entry in values[:-1]]
    assert [value for _status, value in got[:-1]] == [float(value) for _type, _member, value in CASES]
    assert got[-1][0] == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_sample_layout_is_the_one_read() -> None:
    assert field_memory.SAMPLE_LAYOUT_MATCHES


def test_every_sample_value_type_decodes_as_pynvml_does() -> None:
    """Each type's samples, read from memory as columns, equal pynvml's attribute reads; only ``count``
    entries are read; an unknown type is read as unsigned int, as before."""
    for value_type, member, value in CASES:
        buffer = (pynvml.c_nvmlSample_t * 4)()
        for i, entry in enumerate(buffer):
            entry.timeStamp = 1_764_800_000_000_000 + 200_000 * i
            setattr(entry.sampleValue, member, value if i % 2 == 0 else 0)
        stamps, values = field_memory.samples(buffer, 3, value_type)
        read_as = member if value_type in field_memory.VALUE_MEMBERS else "uiVal"
        want = [(int(e.timeStamp), float(getattr(e.sampleValue, read_as))) for e in buffer[:3]]
        got = [(stamp, float(value)) for stamp, value in zip(stamps, values, strict=True)]
        assert got == want, (value_type, got, want)
    stamps, values = field_memory.samples((pynvml.c_nvmlSample_t * 4)(), 0, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
    assert (len(stamps), len(values)) == (0, 0)
