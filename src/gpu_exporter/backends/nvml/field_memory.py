"""Decoding a filled ``nvmlFieldValue_t`` array from its memory, in one pass.

pynvml's structures answer every attribute read through a Python ``__getattribute__``; a field-value
read of a few dozen entries reads three attributes of each, which was about a fifth of the Python
time of the read. The array's bytes are read with :mod:`struct` instead, where pynvml's structure has
the layout of ``nvml.h`` (checked at import; otherwise the attributes are read as before).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
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
