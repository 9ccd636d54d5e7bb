"""The unit-tier tests of tests/process/test_parity.py (split by what they start)."""

from __future__ import annotations

from tests.dcgmfake import scenario_keys
from tests.harness import SCENARIOS, samples
from tests.process.test_parity import MIB, dcgm_exposition


def test_memory_not_in_whole_mib_differs_by_less_than_one_mib() -> None:
    text = (SCENARIOS / "h100x4.scn").read_text()
    keys = scenario_keys(text)
    parsed = samples(dcgm_exposition(text))
    for gpu in range(4):
        want = int(keys[f"gpu{gpu}.memory.used"])
        got = next(v for labels, v in parsed["gpu_memory_used_bytes"].items() if ("gpu", str(gpu)) in labels)
        assert 0 <= want - got < MIB
