"""What the shipped files say of the exporter's own sampling pace is its real default: each backend's
``default_interval`` (a Prometheus example once said "samples every second" while NVML samples every 5 s)."""

from __future__ import annotations

import re

from gpu_exporter.backends.dcgm.backend import DcgmBackend
from gpu_exporter.backends.nvml import NvmlBackend
from tests.harness import REPO

SHIPPED = ("deploy", "alerts", "dashboards")
_CLAIM = re.compile(r"samples? every|samples? (?:once )?(?:a|per) second|samples? on its own", re.IGNORECASE)


def claims(text: str) -> list[str]:
    """The lines of ``text`` that state how often the exporter samples, with the line after each (a
    comment wraps)."""
    lines = text.splitlines()
    return [" ".join(lines[at : at + 2]) for at, line in enumerate(lines) if _CLAIM.search(line)]


def wrong(claim: str) -> bool:
    """A claim is right when it names both backends' defaults, as ``5s on NVML`` and ``1s on DCGM``."""
    spaced = re.sub(r"\s+", " ", claim.replace("#", " "))
    needed = (f"{NvmlBackend.default_interval:g}s on NVML", f"{DcgmBackend.default_interval:g}s on DCGM")
    return not all(phrase in spaced for phrase in needed)


def test_shipped_files_state_the_backends_default_pace() -> None:
    found = []
    for top in SHIPPED:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".yml", ".yaml", ".md", ".service", ".py") and path.is_file():
                text = path.read_text(encoding="utf-8")
                found += [f"{path.relative_to(REPO)}: {claim}" for claim in claims(text) if wrong(claim)]
    assert found == []


def test_a_wrong_pace_is_caught() -> None:
    text = "    # A scrape only hands out the latest snapshot (the exporter samples every second on its own),\n"
    assert [wrong(claim) for claim in claims(text)] == [True]
    right = "# (it samples on its own, by default\n# every 5s on NVML and every 1s on DCGM)\n"
    assert [wrong(claim) for claim in claims(right)] == [False]
