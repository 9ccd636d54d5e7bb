"""``--simulate``: a simulated GPU host under the unmodified nvidia-ml-py and the ordinary NVML
backend, so anyone can try the exporter, its status page, dashboards and alert rules without a GPU.

A pure-Python stand-in for ``libnvidia-ml.so.1`` (:class:`.library.Library`) answers the NVML
calls from a scenario file, in the same format as the test fake (``SCENARIO.md`` in this package):
built-in ones (:mod:`.builtins`) or the user's own. :func:`install` puts it where pynvml looks for
its library (``pynvml.nvmlLib``: pynvml loads nothing when that is already set), so every layer
above the C ABI is the real one. Everything that shows data says it is simulated.
"""

from __future__ import annotations

# The entry points register themselves in library.EXPORTS when imported.
from gpu_exporter.simulate import (  # noqa: F401
    accounting,
    device,
    fields,
    gpm,
    identity,
    platform,
    prm,
    reliability,
    samples,
    sensors,
    system,
    vgpu_license,
    workload,
)
from gpu_exporter.simulate.library import Library


def install(path: str | None, trace: str | None = None) -> Library:
    """Make pynvml use a simulated library reading ``path`` (None: a host without GPUs); returns it.

    This replaces whatever library pynvml loaded in this process, so it is for a process that
    simulates from the start (``--simulate``, tests), never for one that also reads real GPUs.
    """
    import pynvml  # the simulator sits below pynvml, as libnvidia-ml.so.1 would

    library = Library(path, trace)
    with pynvml.libLoadLock:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()  # symbols resolved against another library
    return library
