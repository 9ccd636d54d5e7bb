"""A real Prometheus server (Debian's package) on loopback, scraping one exporter, for tests that need
what only a real scraper shows: scrape timing, staleness, ``increase()`` over stored samples."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.harness import TOOLKIT_LISTENING, bound_port, tool

Result = list[dict[str, object]]


@dataclass
class Prometheus:
    """A running Prometheus and its HTTP API."""

    port: int
    log_path: Path

    def query(self, promql: str) -> Result:
        """The instant query's result vector (empty when nothing matches)."""
        response = httpx.get(f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": promql}, timeout=10)
        response.raise_for_status()
        result: Result = response.json()["data"]["result"]
        return result

    def wait(self, promql: str, check: Callable[[Result], bool], timeout: float) -> Result:
        """Query every 0.2 s until ``check`` holds on the result; fail with the server's log otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = self.query(promql)
                if check(result):
                    return result
            except httpx.HTTPError:
                result = []
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql}: {result} after {timeout}s\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.2)


@contextmanager
def prometheus(
    workdir: Path, target_port: int, scrape_interval: str, rule_files: tuple[Path, ...] = ()
) -> Iterator[Prometheus]:
    """Prometheus scraping ``127.0.0.1:target_port`` as job ``gpu`` every ``scrape_interval`` (rules
    evaluated as often), stopped at the end of the block."""
    binary = tool("prometheus", "Debian's prometheus package")
    config = workdir / "prometheus.yml"
    lines = [f"global: {{scrape_interval: {scrape_interval}, evaluation_interval: {scrape_interval}}}"]
    if rule_files:
        lines += ["rule_files:", *(f"  - {path}" for path in rule_files)]
    lines += ["scrape_configs:", f"  - job_name: gpu\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]"]
    config.write_text("\n".join(lines) + "\n")
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'prometheus-data'}",
             "--web.listen-address=127.0.0.1:0"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Prometheus(bound_port(log_path, lambda: server.poll() is None, TOOLKIT_LISTENING), log_path)
    finally:
        server.terminate()
        server.wait(20)
