"""The process-tier tests of tests/unit/test_config.py (split by what they start)."""

from __future__ import annotations

import pytest

from tests.unit.test_config import _run_cli


@pytest.mark.parametrize(
    "argv",
    [["--collect-interval", "0s"], ["--no-such-flag"], ["--collector.nosuch"], ["--web.listen-address"]],
)
def test_cli_usage_errors_exit_2_with_one_line(argv: list[str]) -> None:
    result = _run_cli(*argv)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-exporter: error: ")
    assert "Traceback" not in result.stderr


def test_cli_version() -> None:
    result = _run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("gpu-exporter ")
