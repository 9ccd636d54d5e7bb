"""The C calling convention as pynvml uses it, from the library's side: arguments arrive as ctypes
objects (``byref(x)`` whose ``_obj`` is the target, arrays and string buffers written in place,
handles as pointers), and every entry point returns an ``nvmlReturn_t`` as a Python int."""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_exporter.simulate import errors

_POINTER = ctypes.sizeof(ctypes.c_void_p)


def number(arg: Any) -> int:
    """An integer argument passed as a ctypes scalar (``c_uint(3)``) or a Python int."""
    return int(arg if isinstance(arg, int) else arg.value)


def target(arg: Any) -> Any:
    """What a pointer argument points at: the object of ``byref(x)``, an array or struct itself, or
    None for NULL."""
    return getattr(arg, "_obj", arg)


def address(pointer: Any) -> int | None:
    """The address a pointer-typed argument holds (a device handle, an event set); None for NULL."""
    if pointer is None:
        return None
    value: int | None = ctypes.cast(pointer, ctypes.c_void_p).value
    return value


def put_pointer(out: Any, value: int) -> None:
    """Store an address into a pointer-typed output (``byref(c_nvmlDevice_t())``)."""
    ctypes.memmove(ctypes.addressof(target(out)), ctypes.byref(ctypes.c_void_p(value)), _POINTER)


def put_string(buf: Any, length: Any, text: str) -> int:
    """Copy ``text`` NUL-terminated into a caller's buffer of ``length`` bytes."""
    if buf is None:
        return errors.INVALID_ARGUMENT
    data = text.encode()
    if len(data) + 1 > number(length):
        return errors.INSUFFICIENT_SIZE
    ctypes.memmove(buf, data + b"\0", len(data) + 1)
    return errors.SUCCESS


def get_string(arg: Any) -> str | None:
    """A ``const char *`` argument (``c_char_p`` or bytes) as text; None for NULL."""
    if arg is None:
        return None
    raw = arg if isinstance(arg, bytes) else arg.value
    return None if raw is None else bytes(raw).decode(errors="replace")


def put(out: Any, value: int) -> int:
    """Store an integer into a scalar output (``byref(c_uint())``); INVALID_ARGUMENT for NULL."""
    obj = target(out)
    if obj is None:
        return errors.INVALID_ARGUMENT
    obj.value = value
    return errors.SUCCESS
