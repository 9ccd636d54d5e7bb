"""The process-tier tests of tests/unit/test_render.py (split by what they start)."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.harness import SCENARIOS, start
from tests.unit.test_render import PROMETHEUS, _encodings


def test_nothing_is_encoded_without_a_scrape_and_once_per_format_under_concurrent_scrapes(
    fakenvml_dir: Path, tmp_path: Path
) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "0.5s",
                     "--log.level", "debug", wait_for="/readyz")  # fmt: skip
    try:
        time.sleep(2.0)  # four cycles, no scrape of /metrics
        assert _encodings(exporter) == []  # the status page's history reads the snapshot, not its text
    finally:
        exporter.stop()

    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h",
                     "--log.level", "debug", wait_for="/readyz")  # fmt: skip
    try:  # one snapshot for the whole test: 24 concurrent scrapes in three formats
        assert _encodings(exporter) == []
        kinds = [PROMETHEUS, {"Accept-Encoding": "gzip"}, {"Accept-Encoding": "identity"}] * 8
        barrier = threading.Barrier(len(kinds))
        with httpx.Client(timeout=10) as client:

            def scrape(headers: dict[str, str]) -> httpx.Response:
                barrier.wait()
                return client.get(exporter.url + "/metrics", headers=headers)

            with ThreadPoolExecutor(len(kinds)) as pool:
                responses = list(pool.map(scrape, kinds))
        assert {response.status_code for response in responses} == {200}
        bodies = {(tuple(kind.items()), response.content) for kind, response in zip(kinds, responses, strict=True)}
        assert len(bodies) == 3  # one body per encoding: every scrape of the snapshot got the same bytes
        assert responses[0].headers["content-type"].startswith("application/openmetrics-text")
        assert responses[0].content.endswith(b"# EOF\n")
        made = _encodings(exporter)  # of that one snapshot
        assert sorted(made) == ["compressed openmetrics", "compressed text", "encoded openmetrics", "encoded text"], (
            made
        )
    finally:
        exporter.stop()


def test_a_scrape_during_an_encoding_gets_the_previous_snapshot_at_once(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Scrapes that arrive while another encodes the newest snapshot are answered with the previous
    snapshot's bytes (at most one interval older), never older, and every scrape succeeds."""
    interval = 0.3
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", f"{interval}s",
                     "--log.level", "debug", wait_for="/readyz")  # fmt: skip
    ages: list[float] = []
    failures: list[object] = []
    try:
        stop = time.monotonic() + 4.0

        def scrape() -> None:
            with httpx.Client(timeout=10) as client:
                while time.monotonic() < stop:
                    response = client.get(exporter.url + "/metrics")
                    received = time.time()
                    if response.status_code != 200:
                        failures.append(response.status_code)
                        continue
                    found = re.search(rb"^gpu_exporter_last_sample_timestamp_seconds (\S+)$", response.content, re.M)
                    assert found is not None
                    ages.append(received - float(found.group(1)))

        threads = [threading.Thread(target=scrape) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        previous = exporter.log().count("with the previous snapshot's bytes while this one is encoded")
    finally:
        exporter.stop()
    assert not failures and len(ages) > 100
    assert previous >= 1  # some scrapes did not wait for an encoding
    # A body is of the newest snapshot or the one before it: its sample is at most two intervals old
    # (one for the previous snapshot, one for the cycle that made the newest), plus scheduling slack.
    assert max(ages) < 2 * interval + 0.5, sorted(ages)[-5:]
