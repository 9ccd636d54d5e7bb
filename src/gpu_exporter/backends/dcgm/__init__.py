"""The DCGM backend (pydcgm behind a narrow adapter); see :mod:`.backend` and ``docs/dcgm.md``."""

from __future__ import annotations

from gpu_exporter.backends.dcgm.backend import DcgmBackend, DcgmUnusable

__all__ = ["DcgmBackend", "DcgmUnusable"]
