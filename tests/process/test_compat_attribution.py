"""dcgm-exporter's attribution labels on the compat series, out of process on the fake NVML, as its
transformations add them (``internal/pkg/transformation/hpc.go`` and ``kubernetes.go``, applied to
every series of the GPU entity group, the exporter-owned Xid and clock-event counts included):

- ``--hpc-job-mapping-dir``: every series of a GPU named by a file is copied once per job id in it,
  with ``hpc_job``; a GPU instance's series take the file ``index.instance`` only, never the GPU's;
- ``-k``: the pod's ``pod``, ``namespace``, ``container`` (``-o``: ``pod_name``, ``pod_namespace``,
  ``container_name``) on every series of the GPU, ``DCGM_FI_DEV_XID_ERRORS`` and the window counts too.

Each test takes a few seconds (waits poll the exposition with a 15 s deadline)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import REPO, SCENARIOS, Labels, start
from tests.podresources_server import FakeKubelet
from tests.process.test_faults import Parsed, wait_for
from tests.system.test_kubernetes import _flags, kubelet  # noqa: F401  # the fixture, used by name

COUNTERS = str(REPO / "tests" / "fixtures" / "default-counters.csv")
# DCGM-named families of the GPU entity group in the default counters (self-metrics are the exporter's own)
XID_FAMILIES = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT")


def _series(parsed: Parsed) -> list[tuple[str, dict[str, str]]]:
    return [(name, dict(labels)) for name, series in parsed.items() if name.startswith("DCGM_") for labels in series]


def _without(labels: dict[str, str], name: str) -> Labels:
    return frozenset((k, v) for k, v in labels.items() if k != name)


def test_hpc_job_copies_every_series_of_the_gpu_once_per_job(fakenvml_dir: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("1001\n1002\n")
    (jobs / "2").write_text("2001\n")
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu0.xid = 13@0.3\ngpu0.clock_event_reasons = 0x4\n")
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "-f", COUNTERS, "-c", "200", "--hpc-job-mapping-dir", str(jobs)
    )  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: any(s.get("xid") == "13" for _, s in _series(p) if "hpc_job" in s))
    finally:
        exporter.stop()
    series = _series(parsed)
    by_gpu: dict[str, dict[tuple[str, Labels], set[str | None]]] = {}
    for name, labels in series:
        key = (name, _without(labels, "hpc_job"))
        by_gpu.setdefault(labels["gpu"], {}).setdefault(key, set()).add(labels.get("hpc_job"))
    assert by_gpu["0"] and all(found == {"1001", "1002"} for found in by_gpu["0"].values()), by_gpu["0"]
    assert by_gpu["2"] and all(found == {"2001"} for found in by_gpu["2"].values())
    assert all(found == {None} for gpu in ("1", "3") for found in by_gpu[gpu].values())
    for family in XID_FAMILIES:  # the exporter-owned series too, as dcgm-exporter transforms them
        assert {labels.get("hpc_job") for name, labels in series if name == family and labels["gpu"] == "0"} == {
            "1001",
            "1002",
        }, family


def test_hpc_job_of_a_gpu_instance_is_its_own_file(fakenvml_dir: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("whole-gpu\n")  # dcgm-exporter keys a GPU instance's series by "0.<GI>" only
    (jobs / "0.5").write_text("55\n")
    exporter = start(fakenvml_dir, SCENARIOS / "mig.scn", tmp_path, "-f", COUNTERS, "-c", "200",
                     "--hpc-job-mapping-dir", str(jobs))  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: any(s.get("hpc_job") == "55" for _, s in _series(p)))
    finally:
        exporter.stop()
    series = [labels for name, labels in _series(parsed) if name == "DCGM_FI_DEV_FB_USED"]
    assert {(labels["GPU_I_ID"], labels.get("hpc_job")) for labels in series} == {
        ("1", None),
        ("5", "55"),
        ("13", None),
    }
    assert not [labels for _, labels in _series(parsed) if labels.get("hpc_job") == "whole-gpu"]


def test_pod_labels_on_every_series_of_the_gpu_xid_and_window_counts_too(
    fakenvml_dir: Path,
    tmp_path: Path,
    kubelet: FakeKubelet,  # noqa: F811  # the fixture
) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu0.xid = 13@0.3\ngpu0.clock_event_reasons = 0x4\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "-c", "200", "-f", COUNTERS, *_flags(kubelet))
    try:
        parsed = wait_for(
            exporter,
            lambda p: (
                any(labels.get("pod") == "trainer-0" for name, labels in _series(p) if name in XID_FAMILIES)
                and any(labels.get("xid") == "13" for name, labels in _series(p))
            ),
        )
    finally:
        exporter.stop()
    gpu0 = [(name, labels) for name, labels in _series(parsed) if labels["gpu"] == "0"]
    assert {name for name, _ in gpu0} >= set(XID_FAMILIES)
    missing = [name for name, labels in gpu0 if (labels.get("pod"), labels.get("namespace"), labels.get("container"))
               != ("trainer-0", "ml", "main")]  # fmt: skip
    assert not missing, missing
    # GPU 3 is nobody's: no pod labels anywhere
    assert not [name for name, labels in _series(parsed) if labels["gpu"] == "3" and "pod" in labels]


def test_old_namespace_pod_label_names(fakenvml_dir: Path, tmp_path: Path, kubelet: FakeKubelet) -> None:  # noqa: F811
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-c", "200", "-o",
                     "-f", str(REPO / "tests" / "fixtures" / "1.x-names.csv"), *_flags(kubelet))  # fmt: skip
    try:
        parsed = wait_for(exporter, lambda p: any(labels.get("pod_name") == "trainer-0" for _, labels in _all(p)))
    finally:
        exporter.stop()
    labels = next(labels for _, labels in _all(parsed) if labels.get("pod_name") == "trainer-0")
    assert (labels["pod_namespace"], labels["container_name"]) == ("ml", "main") and "pod" not in labels


def _all(parsed: Parsed) -> list[tuple[str, dict[str, str]]]:
    return [(name, dict(labels)) for name, series in parsed.items() if name.startswith("dcgm_") for labels in series]
