"""The system-tier tests of tests/unit/test_podresources.py (split by what they start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness import REPO


def test_generated_code_is_current(tmp_path: Path) -> None:
    proto = REPO / "src/gpu_exporter/attribution/proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}"]
        + [str(proto / "podresources_v1.proto")],
        check=True,
    )
    for name in ("podresources_v1_pb2.py", "podresources_v1_pb2.pyi"):
        assert (tmp_path / name).read_text() == (proto / name).read_text(), f"regenerate {name} (see the .proto)"
