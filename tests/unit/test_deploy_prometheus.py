"""The unit-tier tests of tests/system/test_deploy_prometheus.py (split by what they start)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.system.test_deploy_prometheus import KUBERNETES, STATIC, job


@pytest.mark.parametrize("path", [STATIC, KUBERNETES], ids=lambda p: p.name)
def test_examples_keep_the_scrape_timeout_below_the_interval(path: Path) -> None:
    scrape = job(yaml.safe_load(path.read_text()))
    seconds = {key: int(scrape[key].removesuffix("s")) for key in ("scrape_interval", "scrape_timeout")}
    assert seconds["scrape_timeout"] < seconds["scrape_interval"]
