"""The process-tier tests of tests/unit/test_compat_xid.py (split by what they start)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_exporter.catalogue import PRECREATED_XIDS, XID_CODES
from tests.harness import SCENARIOS, samples, start, value
from tests.unit.test_compat_xid import COMMON, FIXTURE, _last_codes


@pytest.mark.parametrize("mode", ["dcgm-exporter", "native", "native-full"])
@pytest.mark.parametrize("codes", [(8, 13, 31, 48), (79, 94, 95)], ids=["8-48", "79-95"])
def test_xid_texts_out_of_process(fakenvml_dir: Path, tmp_path: Path, codes: tuple[int, ...], mode: str) -> None:
    """Each GPU's last Xid: in dcgm-exporter mode err_msg is dcgm-exporter's text; natively the
    status API describes it from the shared table, the counters are the codes seen (with
    --metrics.detail=full also the pre-created subset) and the all-codes total is 1."""
    compat = mode == "dcgm-exporter"
    scenario = tmp_path / "xids.scn"
    events = "".join(f"gpu{gpu}.xid = {code}@0.3\n" for gpu, code in enumerate(codes))
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + events)
    args = {"dcgm-exporter": ("-f", str(FIXTURE)), "native": (), "native-full": ("--metrics.detail", "full")}[mode]
    exporter = start(fakenvml_dir, scenario, tmp_path, *args, "-c", "200")
    expected = dict(enumerate(codes))
    try:
        deadline = time.monotonic() + 20
        while True:
            status, parsed = exporter.get("/api/v1/status").json(), samples(exporter.metrics())
            last = _last_codes(compat, status, parsed)
            if all(last.get(gpu) == code for gpu, code in expected.items()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        exporter.stop()
    for gpu, code in expected.items():
        if compat:
            got = {
                dict(labels)["err_msg"]
                for labels in parsed["DCGM_FI_DEV_XID_ERRORS"]
                if dict(labels)["gpu"] == str(gpu)
            }
            assert got == {COMMON[code][2]}, gpu
        else:
            xid = status["gpus"][gpu]["xid"]
            assert (xid["last"], xid["description"]) == (code, XID_CODES[code].description), gpu
            seen = {dict(labels)["xid"] for labels in parsed["gpu_xid_errors_total"] if dict(labels)["gpu"] == str(gpu)}
            precreated = PRECREATED_XIDS if mode == "native-full" else ()
            assert seen == {str(c) for c in {*precreated, code}}, gpu
            assert value(parsed, "gpu_xid_errors_all_codes_total", gpu=str(gpu)) == 1, gpu


def test_xid_count_window_forgets_old_xids(fakenvml_dir: Path, tmp_path: Path) -> None:
    """DCGM_EXP_XID_ERRORS_COUNT counts the Xids of the last -x milliseconds: one series per code
    while they are in the window, then dcgm-exporter's single zero series without ``xid``."""
    scenario = tmp_path / "xid.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu2.xid = 13@0.3,13@0.4,48@0.5\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "-f", str(FIXTURE), "-c", "200", "-x", "2000")
    seen: list[dict[str, float]] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            parsed = samples(exporter.metrics())
            counts = {
                dict(labels).get("xid", ""): v
                for labels, v in parsed["DCGM_EXP_XID_ERRORS_COUNT"].items()
                if dict(labels)["gpu"] == "2"
            }
            if not seen or seen[-1] != counts:
                seen.append(counts)
            if len(seen) > 1 and counts == {"": 0.0}:
                break
            time.sleep(0.1)
    finally:
        exporter.stop()
    assert {"13": 2.0, "48": 1.0} in seen  # within the window
    assert seen[-1] == {"": 0.0}  # 2 s later: forgotten
    assert all(set(labels) >= {"window_size_in_ms"} for labels in map(dict, parsed["DCGM_EXP_XID_ERRORS_COUNT"]))
