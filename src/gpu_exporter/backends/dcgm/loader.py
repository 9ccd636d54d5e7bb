"""Finding DCGM's Python bindings and explaining why libdcgm would not load.

The bindings are plain modules installed with DCGM (not on PyPI), searched in, in order:
``$DCGM_PYTHON_PATH`` (one or more folders), DCGM 4.x's ``/usr/share/datacenter-gpu-manager-4/
bindings/python3``, DCGM 3.x's ``/usr/local/dcgm/bindings/python3``, then ``sys.path``.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import re
import sys
from types import ModuleType

ENV_PATH = "DCGM_PYTHON_PATH"
DCGM4_BINDINGS = "/usr/share/datacenter-gpu-manager-4/bindings/python3"
DCGM3_BINDINGS = "/usr/local/dcgm/bindings/python3"


def candidate_dirs() -> list[str]:
    """Folders searched for the bindings, in order (``sys.path`` is tried after them)."""
    configured = os.environ.get(ENV_PATH, "")
    return [part for part in configured.split(os.pathsep) if part] + [DCGM4_BINDINGS, DCGM3_BINDINGS]


def import_bindings(folder: str | None) -> tuple[ModuleType, ModuleType]:
    if folder is not None and folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("dcgm_structs"), importlib.import_module("dcgm_agent")


#: The file name the bindings load: ``libdcgm.so.4`` in 4.x bindings, ``libdcgm.so.3`` in 3.x.
_SONAME = re.compile(r"libdcgm\.so\.\d+")


def library_file(bindings_source: str) -> str:
    """The libdcgm file name the bindings' loader asks for, read from their source text."""
    found = _SONAME.search(bindings_source)
    return found.group(0) if found else "libdcgm.so"


def library_dirs(bindings_source: str) -> list[str]:
    """The folders the bindings' loader looks in, in its order: each ``LD_LIBRARY_PATH`` folder
    when the loader reads that variable (4.x bindings do; 3.x ones do not), then
    ``/usr/lib/<machine>-linux-gnu`` and ``/usr/lib64``."""
    dirs = []
    if "LD_LIBRARY_PATH" in bindings_source:
        dirs += [part for part in os.environ.get("LD_LIBRARY_PATH", "").split(":") if part]
    return [*dirs, f"/usr/lib/{platform.machine()}-linux-gnu", "/usr/lib64"]


def library_problem(structs_path: str) -> tuple[str, str]:
    """Why the bindings in ``structs_path`` could not load libdcgm: (reason, detail). The detail
    names the file and the folders searched and, for a file that exists, the loader's own error."""
    try:
        with open(structs_path, encoding="utf-8", errors="replace") as source:
            text = source.read()
    except OSError:
        text = ""
    name = library_file(text)
    dirs = library_dirs(text)
    for folder in dirs:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            try:
                ctypes.CDLL(path)
            except OSError as err:
                return "library_broken", f"{path} exists but does not load: {err}"
    return "library_not_found", f"{name} (the file these bindings load) is in none of {', '.join(dirs)}"
