"""Where NVIDIA's DCGM Python bindings of each release are, for the tests that run the project on them
(tests/system/test_dcgm_releases.py in process, tests/system/test_dcgm_releases_exporter.py out of process).

The bindings are NVIDIA's, not the project's: they are found through ``DCGM_BINDINGS_DIR`` or
``../shared/dcgm-bindings`` beside the repository (one folder per release, ``v4.4.2``), and a test that
needs them is skipped, saying so, where they are not.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.harness import REPO

RELEASES = ["3.3.9", "4.4.2", "4.6.0"]
BINDINGS = Path(os.environ.get("DCGM_BINDINGS_DIR") or REPO.parent / "shared" / "dcgm-bindings")
#: Every module of a bindings folder (forgotten between releases, so each test imports its own).
MODULES = (
    "dcgm_structs", "dcgm_agent", "dcgm_fields", "dcgmvalue", "dcgm_errors", "dcgm_structs_internal",
    "dcgm_agent_internal", "dcgm_fields_internal", "pydcgm", "DcgmHandle", "DcgmSystem", "DcgmGroup",
    "DcgmFieldGroup", "DcgmReader",
)  # fmt: skip
#: The folder whose sitecustomize.py installs the stand-in libdcgm in a new process.
STANDIN = REPO / "tests" / "dcgmstandin"


def bindings(release: str) -> Path:
    """The folder of ``release``'s bindings; skips the test, saying why, when it is not there."""
    folder = BINDINGS / f"v{release}"
    if not (folder / "dcgm_agent.py").is_file():
        pytest.skip(
            f"NVIDIA's DCGM {release} bindings not found in {folder}: set DCGM_BINDINGS_DIR to the folder "
            "holding v3.3.9/, v4.4.2/ and v4.6.0/"
        )
    return folder


def present(release: str) -> bool:
    return (BINDINGS / f"v{release}" / "dcgm_agent.py").is_file()


def forget() -> None:
    """Forget every bindings module imported, and their folders on ``sys.path``."""
    for name in MODULES:
        sys.modules.pop(name, None)
    sys.path[:] = [entry for entry in sys.path if not entry.startswith(str(BINDINGS))]


def process_env(release: str, scenario: Path) -> dict[str, str]:
    """The environment of a process on ``release``'s bindings over the stand-in, its engine's host
    described by ``scenario`` (tests/dcgmstandin/sitecustomize.py)."""
    return {
        "DCGM_PYTHON_PATH": str(BINDINGS / f"v{release}"),
        "DCGM_STANDIN_SCENARIO": str(scenario),
        "PYTHONPATH": os.pathsep.join([str(STANDIN), str(REPO)]),
    }
