"""The README's generated tables match the option table and the catalogue."""

from __future__ import annotations

from gpu_exporter.catalogue import FIXED, METRICS
from gpu_exporter.cli import build_parser
from tests.readme import README, render


def test_generated_sections_are_current() -> None:
    text = README.read_text()
    assert render(text) == text, "README tables are stale: run .venv/bin/python -m tests.readme"


def test_every_flag_and_metric_is_documented() -> None:
    text = README.read_text()
    for action in build_parser()._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in text or f"/ `{flag}`" in text, flag
    for name in [spec.name for spec in METRICS] + list(FIXED):
        assert f"`{name}`" in text, name
