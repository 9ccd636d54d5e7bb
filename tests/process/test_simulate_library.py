"""The simulated NVML (``--simulate``) against the test fake's own contract: every case of
tests/process/test_fakenvml.py that is about the scenario format runs again, unchanged, with the
pure-Python library installed under pynvml instead of the C fake (no fake on LD_LIBRARY_PATH).
This keeps the two implementations of the format in step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.process import test_fakenvml as contract
from tests.process.test_fakenvml import PRELUDE, Pynvml, Run

# The cases about the C build or the loader itself have no Python counterpart.
NOT_ABOUT_THE_FORMAT = {"test_build_command_prints_absolute_dir_and_skips_when_up_to_date"}
INSTALL = """
from gpu_exporter.simulate import install
install(os.environ.get("FAKE_NVML_SCENARIO") or None, os.environ.get("FAKE_NVML_TRACE"))
"""


class Simulated(Pynvml):
    """Runs a snippet with the simulated library installed and no fake library on the path."""

    def __call__(self, scenario: str, body: str, *, init: bool = True) -> Run:
        self.scenario.write_text(textwrap.dedent(scenario))
        self.trace.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
        env |= {"LD_LIBRARY_PATH": "", "FAKE_NVML_SCENARIO": str(self.scenario), "FAKE_NVML_TRACE": str(self.trace)}
        code = PRELUDE + INSTALL + ("nvml.nvmlInit()\n" if init else "") + textwrap.dedent(body)
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert proc.returncode == 0, proc.stderr
        trace = self.trace.read_text().splitlines() if self.trace.exists() else []
        return Run(json.loads(proc.stdout.splitlines()[-1]), proc.stderr, trace)


@pytest.fixture
def pynvml_run(tmp_path: Path) -> Pynvml:
    return Simulated(tmp_path, tmp_path)


for _name in dir(contract):
    if _name.startswith("test_") and _name not in NOT_ABOUT_THE_FORMAT:
        globals()[_name] = getattr(contract, _name)
