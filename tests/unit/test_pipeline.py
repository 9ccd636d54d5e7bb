"""The unit-tier tests of tests/process/test_pipeline.py (split by what they start)."""

from __future__ import annotations

import threading
import time

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.backends.dcgm.values import FE_GPU
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from tests.dcgmfake import int64
from tests.harness import samples, value
from tests.unit.test_dcgm_backend import host


def test_a_hung_dcgm_read_stalls_only_its_gpu_and_never_the_sampler() -> None:
    fake = host(gpus=3, mig_on_last=False)
    interval = 0.25
    specs = enabled_specs(DEFAULT_COLLECTORS)
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, interval), specs, interval, "test", watch_events=True)
    published: list[float] = []
    sampler.start()
    try:
        assert sampler.first_cycle_done.wait(5)
        fake.hang[(FE_GPU, 1)] = 6 * interval  # GPU 1's next fetch hangs for six intervals
        fake.values[(FE_GPU, 0)][155] = int64(300)  # GPU 0's power changes meanwhile
        deadline = time.monotonic() + 4 * interval
        seen = sampler.snapshot
        while time.monotonic() < deadline:
            if sampler.snapshot is not seen:
                seen = sampler.snapshot
                published.append(seen.taken_at)
            time.sleep(0.01)
        parsed = samples(sampler.snapshot.rendered.text.decode())
        threads = set(fake.threads)
    finally:
        fake.hang.clear()
        sampler.stop()
    # a snapshot every interval, on time (the old design published none during the hang)
    assert len(published) >= 3
    assert max(b - a for a, b in zip(published, published[1:], strict=False)) < 2 * interval
    assert value(parsed, "gpu_exporter_device_stalled", gpu="1") == 1
    assert value(parsed, "gpu_exporter_device_stalled", gpu="0") == 0
    assert value(parsed, "gpu_power_watts", gpu="0") == 300  # the others keep updating
    assert value(parsed, "gpu_power_watts", gpu="2") is not None
    assert value(parsed, "gpu_exporter_collector_success", collector="power") == 0  # a read hung
    # no vendor call ever ran on the sampler's thread (or the caller's)
    assert "sampler" not in threads and threading.current_thread().name not in threads
    assert {"backend-control", "fabric-reader", "gpu0-reader", "gpu1-reader"} <= threads
