"""The unit-tier tests of tests/process/test_unrepairable_memory.py (split by what they start)."""

from __future__ import annotations

from gpu_exporter.backends.nvml.memory_flag import VERSION, decode


def test_decode_either_layout() -> None:
    assert decode(VERSION, 1) == 1 and decode(VERSION, 0) == 0  # the version word kept: the second word
    assert decode(1, 0) == 1 and decode(0, 0) == 0  # the flag over the version word
    assert decode(7, 0) is None and decode(VERSION, 5) is None  # neither layout's 0/1: absent
