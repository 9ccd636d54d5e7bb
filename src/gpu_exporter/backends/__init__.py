"""GPU backends. Vendor libraries are imported only inside their own backend module; the registry
(:mod:`.registry`) builds them by name."""

from __future__ import annotations

from gpu_exporter.backends.registry import select, with_interval

__all__ = ["select", "with_interval"]
