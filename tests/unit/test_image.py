"""The unit-tier tests of tests/system/test_image.py (split by what they start)."""

from __future__ import annotations

from tests.harness import REPO


def test_build_context_is_only_the_package() -> None:
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*" and {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)
