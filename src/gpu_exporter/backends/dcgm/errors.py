"""The DCGM adapter's errors, typed by DCGM status, in the project's words."""

from __future__ import annotations

from gpu_exporter.backends.base import BackendUnavailable
from gpu_exporter.backends.dcgm.values import (
    ST_CONNECTION_NOT_VALID,
    ST_FIELD_UNSUPPORTED_BY_API,
    ST_GPU_NOT_SUPPORTED,
    ST_IN_USE,
    ST_MODULE_NOT_LOADED,
    ST_NO_PERMISSION,
    ST_NOT_SUPPORTED,
    ST_PROFILING_LIBRARY_ERROR,
    ST_PROFILING_NOT_SUPPORTED,
    ST_REQUIRES_ROOT,
    ST_VER_MISMATCH,
    STATUS_KINDS,
)


class DcgmUnavailable(Exception):
    """The bindings or ``libdcgm.so`` cannot be loaded at all. ``reason``: ``bindings_not_found``,
    ``bindings_broken``, ``library_not_found`` (no file where the bindings look),
    ``library_broken`` (the file is there but does not load) or ``init_failed`` (``dcgmInit``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class DcgmError(Exception):
    """A DCGM call returned ``code`` (a DCGM_ST_* status, negative)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def kind(self) -> str:
        """The status as a short word (``no_permission``, ``connection_not_valid``, ...)."""
        return STATUS_KINDS.get(self.code, f"status_{-self.code}")


class DcgmNotSupported(DcgmError):
    """DCGM_ST_NOT_SUPPORTED, DCGM_ST_PROFILING_NOT_SUPPORTED, DCGM_ST_GPU_NOT_SUPPORTED."""


class DcgmNoPermission(DcgmError):
    """DCGM_ST_NO_PERMISSION or DCGM_ST_REQUIRES_ROOT (profiling needs a root host engine)."""


class DcgmProfilingInUse(DcgmError):
    """DCGM_ST_PROFILING_LIBRARY_ERROR or DCGM_ST_IN_USE: another profiler (Nsight, CUPTI, a
    second host engine) holds the driver's one profiling lock."""


class DcgmModuleNotLoaded(DcgmError):
    """DCGM_ST_MODULE_NOT_LOADED: the host engine has not loaded the module serving the request
    (profiling: nv-hostengine started with the module denied, or the module failed to load). As
    NVIDIA's own tests do, the feature is treated as not available, not as a failure."""


class DcgmVersionMismatch(DcgmError):
    """DCGM_ST_VER_MISMATCH: the library and the host engine speak different API versions. DCGM 4.7.1
    answers it to some requests when one side is 4.7.1 and the other an earlier release (dcgm-exporter
    4.9.0's release notes: "run a 4.7.1 host engine with a 4.7.1 libdcgm")."""


class DcgmConnectionLost(DcgmError):
    """DCGM_ST_CONNECTION_NOT_VALID: the host engine went away (or we never connected)."""


_ERROR_CLASSES: dict[int, type[DcgmError]] = {
    ST_NOT_SUPPORTED: DcgmNotSupported,
    ST_PROFILING_NOT_SUPPORTED: DcgmNotSupported,
    ST_GPU_NOT_SUPPORTED: DcgmNotSupported,
    ST_FIELD_UNSUPPORTED_BY_API: DcgmNotSupported,
    ST_NO_PERMISSION: DcgmNoPermission,
    ST_REQUIRES_ROOT: DcgmNoPermission,
    ST_PROFILING_LIBRARY_ERROR: DcgmProfilingInUse,
    ST_IN_USE: DcgmProfilingInUse,
    ST_MODULE_NOT_LOADED: DcgmModuleNotLoaded,
    ST_CONNECTION_NOT_VALID: DcgmConnectionLost,
    ST_VER_MISMATCH: DcgmVersionMismatch,
}


def dcgm_error(code: int, message: str) -> DcgmError:
    """The typed error for DCGM status ``code``."""
    return _ERROR_CLASSES.get(code, DcgmError)(code, message)


#: What to do when DCGM cannot be loaded, by reason.
FIXES = {
    "bindings_not_found": "install DCGM (datacenter-gpu-manager-4-core) or set DCGM_PYTHON_PATH to its "
    "bindings/python3 folder, or run with --backend nvml",
    "bindings_broken": "reinstall DCGM or point DCGM_PYTHON_PATH at bindings matching this Python, or run with "
    "--backend nvml",
    "library_not_found": "install libdcgm of the same DCGM release as the bindings (datacenter-gpu-manager-4-core "
    "for 4.x bindings) where they look for it, or run with --backend nvml",
    "library_broken": "reinstall DCGM so that libdcgm matches the bindings and this machine, or run with "
    "--backend nvml",
    "init_failed": "see the message above and the DCGM log, reinstall DCGM, or run with --backend nvml",
    "dcgm_ver_mismatch": "the host engine (nv-hostengine) and the libdcgm this exporter loads are different DCGM "
    "releases, which DCGM 4.7.1 refuses when either side is 4.7.1: run both from the same release (a 4.7.1 "
    "host engine with a 4.7.1 libdcgm: upgrade datacenter-gpu-manager-4 on the host and in the image together), "
    "or run with --backend nvml",
}


class DcgmUnusable(BackendUnavailable):
    """DCGM cannot be used: ``summary`` says why in a few words (for gpu_exporter_backend_info),
    the message adds what to do."""

    def __init__(self, reason: str, summary: str, fix: str) -> None:
        super().__init__(reason, f"{summary}; {fix}")
        self.summary = summary
