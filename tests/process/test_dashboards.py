"""The process-tier tests of tests/unit/test_dashboards.py (split by what they start)."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.test_dashboards import DASHBOARDS


def test_committed_json_is_what_the_generator_writes() -> None:
    result = subprocess.run([sys.executable, str(DASHBOARDS / "generate.py"), "check"], capture_output=True,
                            text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
