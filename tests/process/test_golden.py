"""The process-tier tests of tests/system/test_golden.py (split by what they start)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import stable
from tests.system.test_golden import GOLDEN, NAMES, _scrape


@pytest.mark.parametrize("name", NAMES)
def test_exposition_matches_golden(fakenvml_dir: Path, tmp_path: Path, name: str) -> None:
    text = stable(_scrape(fakenvml_dir, tmp_path, name))
    golden = GOLDEN / f"{name}.prom"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run UPDATE_GOLDEN=1 .venv/bin/pytest tests/system/test_golden.py"
    assert text == golden.read_text(), f"/metrics differs from {golden}; see the module docstring to regenerate"
