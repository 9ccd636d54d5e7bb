"""The process-tier tests of tests/unit/test_check_real_gpu.py (split by what they start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.test_check_real_gpu import SCRIPT


def test_exit_codes_where_it_cannot_run(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no nvidia-smi
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.count("\n")) == (3, 1) and "no nvidia-smi" in done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--rounds must be 1-60" in done.stderr
