"""DCGM 4.7 and 4.8 engines in the doubles: DCGM 4.7.1's refusal between a 4.7.1 libdcgm and an earlier
host engine (or the reverse), reported as what it is with the fix, and the ids engines of 4.6.1 to 4.8
know (4.6.1 adds the base-unit fields 1600-1612, 4.7.0 1613-1650; 4.8.0 lists no new id)."""

from __future__ import annotations

import pytest

from gpu_exporter.backends.dcgm import DcgmBackend
from gpu_exporter.backends.dcgm.errors import DcgmUnusable
from gpu_exporter.backends.dcgm.releases import KNOWN, known_ids
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from tests.unit.test_dcgm_backend import host

SPECS = enabled_specs(DEFAULT_COLLECTORS)


def _backend(library: str, engine: str) -> DcgmBackend:
    fake = host(gpus=2, mig_on_last=False)
    fake.release, fake.library = engine, library
    fake.__post_init__()
    return DcgmBackend(lambda: fake, SPECS, 3600.0)


@pytest.mark.parametrize(("library", "engine"), [("4.7.1", "4.7.0"), ("4.7.1", "4.6.1"), ("4.6.1", "4.7.1")])
def test_a_4_7_1_side_with_an_earlier_one_is_refused_as_a_version_mismatch_with_the_fix(
    library: str, engine: str
) -> None:
    backend = _backend(library, engine)
    try:
        with pytest.raises(DcgmUnusable) as caught:
            backend.probe()
    finally:
        backend.close()
    err = caught.value
    assert err.reason == "dcgm_ver_mismatch"
    assert f"API version mismatch (libdcgm {library}, host engine {engine})" in err.summary
    assert "a 4.7.1 host engine with a 4.7.1 libdcgm" in str(err) and "--backend nvml" in str(err)


@pytest.mark.parametrize(
    ("library", "engine"), [("4.7.1", "4.7.1"), ("4.7.0", "4.6.1"), ("4.8.0", "4.8.0"), ("", "4.8.0")]
)
def test_same_release_or_no_4_7_1_side_serves(library: str, engine: str) -> None:
    backend = _backend(library, engine)
    try:
        mode, gpus = backend.probe()
    finally:
        backend.close()
    assert gpus == 2 and mode


def test_4_6_1_4_7_and_4_8_engines_know_their_base_unit_fields() -> None:
    assert known_ids((4, 7, 1)) == known_ids((4, 8, 0)) == KNOWN[(4, 7, 0)] == KNOWN[max(KNOWN)]
    assert known_ids((4, 6, 1)) - known_ids((4, 6, 0)) == frozenset(range(1600, 1613))
    assert known_ids((4, 7, 0)) - known_ids((4, 6, 1)) == frozenset(range(1613, 1651))
    # DCGM 4.7's ids of dcgm-exporter 4.9's names: the GPU utilisation ratio, framebuffer bytes, NVLink bytes/s
    assert {1613, 1625, 1648} <= known_ids((4, 7, 0)) and not {1613, 1625, 1648} & known_ids((4, 6, 1))
