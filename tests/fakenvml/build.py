"""Build the fake ``libnvidia-ml.so.1`` that the tests run the unmodified nvidia-ml-py against.

Usage, from the repository root::

    python -m tests.fakenvml.build OUTDIR

compiles ``OUTDIR/libnvidia-ml.so.1`` (SONAME ``libnvidia-ml.so.1``) from the C sources next to
this file against the real ``nvml.h`` of the pinned ``nvidia-nvml-dev`` wheel, and prints the
absolute OUTDIR as the last line. The build is skipped when the library is newer than every
source. It needs only gcc (or ``$CC``) and that wheel; without them it exits 1 with one line
saying what to install. The scenario format is in ``README.md`` next to this file.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC_DIR = Path(__file__).resolve().parent
LIB_NAME = "libnvidia-ml.so.1"
HEADER_WHEEL = "nvidia-nvml-dev"
HEADER_PIN = "13.5.37"

# -Werror against the real header is the point: pynvml sets no argtypes, so a wrong signature
# would otherwise only show up as garbage values at run time.
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-O2"]
LDFLAGS = [f"-Wl,-soname,{LIB_NAME}", "-Wl,--no-undefined", "-lpthread"]


class BuildError(Exception):
    """The fake cannot be built; the message says what to install or fix."""


def find_header_dir() -> Path:
    """Return the directory holding ``nvml.h`` from the installed ``nvidia-nvml-dev`` wheel."""
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(HEADER_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        for file in dist.files or []:
            if file.name == "nvml.h":
                candidates.append(Path(str(dist.locate_file(file))).parent)
    # The wheel installs into the ``nvidia`` namespace package: nvidia/cu13/include/nvml.h.
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidates.append(Path(location) / "cu13" / "include")
    for directory in candidates:
        if (directory / "nvml.h").is_file():
            return directory
    raise BuildError(f"nvml.h not found: pip install {HEADER_WHEEL}=={HEADER_PIN}")


def find_compiler() -> str:
    """Return the C compiler to use: ``$CC`` or gcc."""
    name = os.environ.get("CC", "gcc")
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"C compiler {name!r} not found: install gcc (apt-get install gcc) or set CC")
    return path


def sources() -> list[Path]:
    """The C sources compiled into the library."""
    return sorted(SRC_DIR.glob("*.c"))


def _up_to_date(lib: Path, inputs: list[Path]) -> bool:
    if not lib.is_file():
        return False
    built = lib.stat().st_mtime_ns
    return all(path.stat().st_mtime_ns < built for path in inputs)


def build(outdir: Path) -> Path:
    """Compile the fake into ``outdir/libnvidia-ml.so.1`` unless it is up to date; return ``outdir``.

    Raises:
        BuildError: gcc or the header wheel is missing, or the compiler failed.
    """
    outdir = outdir.resolve()
    header_dir = find_header_dir()
    lib = outdir / LIB_NAME
    inputs = [*sources(), *SRC_DIR.glob("*.h"), header_dir / "nvml.h", Path(__file__).resolve()]
    if _up_to_date(lib, inputs):
        return outdir
    compiler = find_compiler()
    outdir.mkdir(parents=True, exist_ok=True)
    # Compile to a temporary name and rename, so a concurrent reader never loads half a file.
    fd, tmp_name = tempfile.mkstemp(prefix=".libnvidia-ml.", suffix=".tmp", dir=outdir)
    os.close(fd)
    tmp = Path(tmp_name)
    command = [compiler, *CFLAGS, f"-I{header_dir}", "-o", str(tmp), *map(str, sources()), *LDFLAGS]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(f"compiling the fake failed:\n{result.stdout}{result.stderr}".rstrip())
        tmp.replace(lib)
    finally:
        tmp.unlink(missing_ok=True)
    return outdir


def main(argv: list[str] | None = None) -> int:
    """Command line: build into the directory given as the only argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m tests.fakenvml.build OUTDIR", file=sys.stderr)
        return 2
    try:
        outdir = build(Path(args[0]))
    except BuildError as exc:
        print(f"fakenvml: {exc}", file=sys.stderr)
        return 1
    print(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
