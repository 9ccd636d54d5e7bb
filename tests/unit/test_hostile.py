"""The unit-tier tests of tests/process/test_hostile.py (split by what they start)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from gpu_exporter.cli import _load_counters, parse_settings
from gpu_exporter.compat.counters import CountersError
from gpu_exporter.config import ConfigError
from gpu_exporter.http.webconfig import WebConfigError, load
from tests.process.test_hostile import _fuzz, _one_line


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path / "fuzzed"


def test_fuzz_config_file(scratch: Path) -> None:
    @_fuzz
    def check(data: bytes) -> None:
        scratch.write_bytes(data)
        try:
            parse_settings(["--config.file", str(scratch)], {})
        except ConfigError as err:
            _one_line(err)

    check()


def test_fuzz_web_config(scratch: Path) -> None:
    @_fuzz
    def check(data: bytes) -> None:
        scratch.write_bytes(data)
        try:
            load(str(scratch))
        except WebConfigError as err:
            _one_line(err)

    check()


def test_fuzz_counters_csv(scratch: Path) -> None:
    @_fuzz
    def check(data: bytes) -> None:
        scratch.write_bytes(data)
        with contextlib.suppress(CountersError):  # its own messages; the CLI bounds them (tested above)
            _load_counters(str(scratch))

    check()
