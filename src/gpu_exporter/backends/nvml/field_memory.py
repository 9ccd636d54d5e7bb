"""Decoding filled NVML arrays (``nvmlFieldValue_t``, ``nvmlSample_t``) from their memory, in one pass.

pynvml's structures answer every attribute read through a Python ``__getattribute__``; a field-value
read of a few dozen entries reads three attributes of each, which was about a fifth of the Python
time of the read, and the sample buffers hand over a few hundred samples per GPU per read (power alone
about 120), whose attribute reads were a third of a 64-GPU host's sampling CPU. The arrays' bytes are
read with :mod:`struct` instead, where pynvml's structures have the layout of ``nvml.h`` (checked at
import; otherwise the attributes are read as before).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import pynvml

from gpu_exporter.backends.nvml.readers import VALUE_MEMBERS, field_value

# nvmlFieldValue_t: fieldId, scopeId (unsigned int), timestamp, latencyUsec (long long), valueType,
# nvmlReturn (enums), then the 8-byte value union.
_ENTRY = struct.Struct("=IIqqiI8s")
_MEMBER_TYPES = dict(pynvml.c_nvmlValue_t._fields_)
#: valueType → decoder of the union member it names (the member's own C type: native size and order).
_UNION: dict[int, struct.Struct] = {
    value_type: struct.Struct("@" + _MEMBER_TYPES[member]._type_) for value_type, member in VALUE_MEMBERS.items()
}
#: An unknown valueType is read as unsigned long long, as field_value does.
_DEFAULT = struct.Struct("@" + _MEMBER_TYPES["ullVal"]._type_)


def _layout_matches() -> bool:
    """True when pynvml's ``c_nvmlFieldValue_t`` is laid out as :data:`_ENTRY` reads it."""
    kind = pynvml.c_nvmlFieldValue_t
    names = [name for name, _type in kind._fields_]
    if names != ["fieldId", "scopeId", "timestamp", "latencyUsec", "valueType", "nvmlReturn", "value"]:
        return False
    offsets = [getattr(kind, name).offset for name in names]
    return offsets == [0, 4, 8, 16, 24, 28, 32] and ctypes.sizeof(kind) == _ENTRY.size


LAYOUT_MATCHES = _layout_matches()


def decoded(values: Any) -> Iterator[tuple[int, float]]:
    """(nvmlReturn, value) of each entry of a filled array, in order; the value is 0.0 (and not
    to be used) where nvmlReturn is not NVML_SUCCESS."""
    if not LAYOUT_MATCHES:
        for entry in values:
            status = entry.nvmlReturn
            yield status, (field_value(entry) if status == pynvml.NVML_SUCCESS else 0.0)
        return
    union, default = _UNION, _DEFAULT
    memory = ctypes.string_at(ctypes.addressof(values), ctypes.sizeof(values))
    for _field, _scope, _at, _latency, value_type, status, value in _ENTRY.iter_unpack(memory):
        yield status, (float(union.get(value_type, default).unpack_from(value)[0]) if status == 0 else 0.0)


# nvmlSample_t: timeStamp (unsigned long long), then the 8-byte value union. The array is read as two
# strided columns of its bytes: the timestamps, and the union member the valueType names.
_SAMPLE_SIZE = 16


def _column(member: str) -> tuple[str, int, int]:
    """(memoryview format, index of the first entry's value, stride) of a union member's column."""
    code = _MEMBER_TYPES[member]._type_
    size = struct.calcsize("@" + code)
    return code, 8 // size, _SAMPLE_SIZE // size


_COLUMNS = {value_type: _column(member) for value_type, member in VALUE_MEMBERS.items()}


def _sample_layout_matches() -> bool:
    """True when pynvml's ``c_nvmlSample_t`` is laid out as :data:`_COLUMNS` reads it."""
    kind = pynvml.c_nvmlSample_t
    names = [name for name, _type in kind._fields_]
    return (
        names == ["timeStamp", "sampleValue"]
        and kind.sampleValue.offset == 8
        and ctypes.sizeof(kind) == _SAMPLE_SIZE
        and ctypes.sizeof(pynvml.c_nvmlValue_t) == 8
        and struct.calcsize("@Q") == 8
    )


SAMPLE_LAYOUT_MATCHES = _sample_layout_matches()


def samples(buffer: Any, count: int, value_type: int) -> tuple[Sequence[int], Sequence[float]]:
    """(timestamps, values) of the first ``count`` entries of a filled ``nvmlSample_t`` array, oldest
    first, as two columns read from its memory (no object per sample until one is looked at); a value is
    the union member ``value_type`` names (unsigned int when it is unknown)."""
    if not SAMPLE_LAYOUT_MATCHES:
        member = VALUE_MEMBERS.get(value_type, "uiVal")
        entries = buffer[:count]
        return [int(e.timeStamp) for e in entries], [float(getattr(e.sampleValue, member)) for e in entries]
    code, first, stride = _COLUMNS.get(value_type) or _COLUMNS[pynvml.NVML_VALUE_TYPE_UNSIGNED_INT]
    memory = memoryview(ctypes.string_at(ctypes.addressof(buffer), count * _SAMPLE_SIZE))
    values: Sequence[float] = memory.cast(code)[first::stride]  # type: ignore[call-overload]  # code: a format
    return memory.cast("Q")[0::2], values
