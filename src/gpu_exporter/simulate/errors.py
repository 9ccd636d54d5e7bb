"""NVML's return codes by name (the ``NVML_ERROR_<NAME>`` suffixes of ``nvml.h``) with the texts
``nvmlErrorString`` gives, and how a scenario names an error."""

from __future__ import annotations

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
TIMEOUT = 10
GPU_IS_LOST = 15
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

#: name → (code, text), in nvml.h's order.
ERRORS: dict[str, tuple[int, str]] = {
    "SUCCESS": (0, "Success"),
    "UNINITIALIZED": (1, "Uninitialized"),
    "INVALID_ARGUMENT": (2, "Invalid Argument"),
    "NOT_SUPPORTED": (3, "Not Supported"),
    "NO_PERMISSION": (4, "Insufficient Permissions"),
    "ALREADY_INITIALIZED": (5, "Already Initialized"),
    "NOT_FOUND": (6, "Not Found"),
    "INSUFFICIENT_SIZE": (7, "Insufficient Size"),
    "INSUFFICIENT_POWER": (8, "Insufficient External Power"),
    "DRIVER_NOT_LOADED": (9, "Driver Not Loaded"),
    "TIMEOUT": (10, "Timeout"),
    "IRQ_ISSUE": (11, "Interrupt Request Issue"),
    "LIBRARY_NOT_FOUND": (12, "NVML Shared Library Not Found"),
    "FUNCTION_NOT_FOUND": (13, "Function Not Found"),
    "CORRUPTED_INFOROM": (14, "Corrupted infoROM"),
    "GPU_IS_LOST": (15, "GPU is lost"),
    "RESET_REQUIRED": (16, "GPU requires restart"),
    "OPERATING_SYSTEM": (17, "The operating system has blocked the request."),
    "LIB_RM_VERSION_MISMATCH": (18, "RM has detected an NVML/RM version mismatch."),
    "IN_USE": (19, "In use by another client"),
    "MEMORY": (20, "Insufficient Memory"),
    "NO_DATA": (21, "No data"),
    "VGPU_ECC_NOT_SUPPORTED": (22, "vGPU operation not available with ECC enabled"),
    "INSUFFICIENT_RESOURCES": (23, "Ran out of critical resources, other than memory"),
    "FREQ_NOT_SUPPORTED": (24, "Frequency not supported"),
    "ARGUMENT_VERSION_MISMATCH": (25, "Argument version mismatch"),
    "DEPRECATED": (26, "Deprecated"),
    "NOT_READY": (27, "Not ready"),
    "GPU_NOT_FOUND": (28, "GPU not found"),
    "INVALID_STATE": (29, "Invalid state"),
    "RESET_TYPE_NOT_SUPPORTED": (30, "Reset type not supported"),
    "UNKNOWN": (999, "Unknown Error"),
}
_TEXTS = {code: text for code, text in ERRORS.values()}


def code_of(name: str) -> int | None:
    """``GPU_IS_LOST``, ``NVML_ERROR_GPU_IS_LOST``, ``gpu_is_lost`` or ``15`` → 15; None if unknown."""
    upper = name.upper()
    for prefix in ("NVML_ERROR_", "NVML_"):
        if upper.startswith(prefix):
            upper = upper[len(prefix) :]
            break
    if upper.isascii() and upper.isdigit():
        return int(upper)
    known = ERRORS.get(upper)
    return known[0] if known else None


def text_of(code: int) -> bytes:
    """What ``nvmlErrorString`` returns (bytes, as a ``c_char_p`` result)."""
    return _TEXTS.get(code, "Unknown Error").encode()
