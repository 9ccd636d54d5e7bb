"""Per-process series, out of process on the fake NVML with a fake procfs tree: values and labels
exact, names from /proc (absent when the entry is missing, never wrong), the per-GPU limit folding
the smallest processes into one pid="other" series."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value
from tests.process.test_faults import wait_for

GIB = 1024**3
PROCESSES = """
gpu0.process.0.pid = 4242
gpu0.process.0.used_memory = 8589934592
gpu0.process.0.sm_util = 37
gpu0.process.0.mem_util = 12
gpu0.process.1.pid = 4343
gpu0.process.1.used_memory = 1073741824
gpu0.process.1.sm_util = 5
gpu0.process.2.pid = 4444
gpu0.process.2.used_memory = 2147483648
gpu0.process.2.sm_util = 20
gpu1.process.0.pid = 5151
gpu1.process.0.used_memory = 4294967296
"""


POD_UID = "2f8a1c9e-7b3d-4e5f-9a0b-1c2d3e4f5a6b"
CGROUPS = {
    4242: "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",  # Slurm, cgroup v2
    5151: (  # a Kubernetes pod, systemd driver, containerd, cgroup v1
        "12:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        + POD_UID.replace("-", "_")
        + ".slice/cri-containerd-"
        + "ab" * 32
        + ".scope\n1:name=systemd:/kubepods.slice\n"
    ),
}


def procfs(root: Path) -> Path:
    """A /proc with 4242 (python3, root), 4444 (a name with a quote and a newline, uid 4000 that no
    user has) and 5151 (trainer, uid 0); 4343 has no entry (it exited, or another PID namespace)."""
    for pid, name, uid in ((4242, "python3", 0), (4444, 'evil"\nname', 4000), (5151, "trainer", 0)):
        entry = root / str(pid)
        entry.mkdir(parents=True)
        (entry / "cgroup").write_text(CGROUPS.get(pid, "0::/user.slice/user-1000.slice/session-3.scope\n"))
        (entry / "comm").write_text(name + "\n")
        (entry / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (entry / "stat").write_text(f"{pid} ({name}) S " + " ".join(["1"] * 19) + " 123456 0 0\n")
    return root


def _run(fakenvml_dir: Path, tmp_path: Path, *flags: str) -> str:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    root = procfs(tmp_path / "proc")
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--path.procfs", str(root), *flags)
    try:
        return exporter.metrics()
    finally:
        exporter.stop()


def test_every_process_with_its_values_name_and_user(fakenvml_dir: Path, tmp_path: Path) -> None:
    text = _run(fakenvml_dir, tmp_path)
    parsed = samples(text)
    gpu0 = {"gpu": "0", "uuid": "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"}
    python = {**gpu0, "pid": "4242", "process": "python3", "user": "root"}
    assert value(parsed, "gpu_process_memory_used_bytes", **python) == 8 * GIB
    assert value(parsed, "gpu_process_sm_utilization_ratio", **python) == 0.37
    assert value(parsed, "gpu_process_memory_utilization_ratio", **python) is None  # full detail only
    (tmp_path / "full").mkdir()
    full = samples(_run(fakenvml_dir, tmp_path / "full", "--metrics.detail", "full"))
    assert value(full, "gpu_process_memory_utilization_ratio", **python) == 0.12
    assert value(parsed, "gpu_processes", **python) == 1
    # no /proc entry: the pid is exported, the names are empty (absent), never guessed
    assert value(parsed, "gpu_process_memory_used_bytes", **gpu0, pid="4343", process="", user="") == GIB
    # a user id without a name stays a number; a hostile name is escaped, not broken
    hostile = [line for line in text.splitlines() if 'pid="4444"' in line and line.startswith("gpu_processes{")]
    # (no workload labels: its cgroup is a login session)
    assert hostile == [
        'gpu_processes{gpu="0",pid="4444",process="evil\\"\\nname",user="4000",'
        'uuid="GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"} 1.0'
    ]
    gpu1 = {"gpu": "1", "uuid": "GPU-4a1e0c2d-1b7f-4c3a-9e21-5d8f6a0b1c11"}
    assert value(parsed, "gpu_process_memory_used_bytes", **gpu1, pid="5151", process="trainer", user="root") == 4 * GIB
    assert not [labels for labels in parsed["gpu_processes"] if dict(labels)["gpu"] in ("2", "3")]
    assert value(parsed, "gpu_exporter_collector_success", collector="processes") == 1


def _fresh(path: Path) -> Path:
    path.mkdir()
    return path


def test_owners_named_from_a_mounted_passwd_file(fakenvml_dir: Path, tmp_path: Path) -> None:
    """In a container the exporter's own user database does not know the host's users: --path.passwd
    names them from the host's file; a uid the file lacks stays a number."""
    passwd = tmp_path / "host-passwd"
    passwd.write_text("# the host's users\nroot:x:0:0::/root:/bin/sh\nbroken line\nlab-admin:x:0:0::/:/bin/sh\n")
    parsed = samples(_run(fakenvml_dir, tmp_path, "--path.passwd", str(passwd)))
    assert value(parsed, "gpu_processes", gpu="0", pid="4242", process="python3", user="root") == 1
    assert value(parsed, "gpu_processes", gpu="0", pid="4444", user="4000") == 1
    passwd.write_text("ops:x:4000:4000::/:/bin/sh\n")
    assert value(samples(_run(fakenvml_dir, _fresh(tmp_path / "again"), "--path.passwd", str(passwd))),
                 "gpu_processes", gpu="0", pid="4444", user="ops") == 1  # fmt: skip


def test_processes_beyond_the_limit_fold_into_one_series(fakenvml_dir: Path, tmp_path: Path) -> None:
    parsed = samples(_run(fakenvml_dir, tmp_path, "--collector.processes.max-per-gpu", "1"))
    gpu0 = {"gpu": "0", "uuid": "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"}
    series = {dict(labels)["pid"] for labels in parsed["gpu_processes"] if dict(labels)["gpu"] == "0"}
    assert series == {"4242", "other"}  # the largest process keeps its own series
    other = {**gpu0, "pid": "other", "process": "", "user": ""}
    assert value(parsed, "gpu_processes", **other) == 2
    assert value(parsed, "gpu_process_memory_used_bytes", **other) == 3 * GIB
    assert value(parsed, "gpu_process_sm_utilization_ratio", **other) == 0.25
    assert {dict(labels)["pid"] for labels in parsed["gpu_processes"] if dict(labels)["gpu"] == "1"} == {"5151"}


def test_processes_collector_off(fakenvml_dir: Path, tmp_path: Path) -> None:
    assert "gpu_process_" not in _run(fakenvml_dir, tmp_path, "--no-collector.processes")


def test_mig_and_graphics_processes(fakenvml_dir: Path, tmp_path: Path) -> None:
    """A process NVML lists in a MIG instance carries that instance's labels; graphics processes count too."""
    scenario = tmp_path / "mig.scn"
    scenario.write_text(
        (SCENARIOS / "mig.scn").read_text()
        + "gpu0.process.0.pid = 4242\ngpu0.process.0.used_memory = 1073741824\n"
        + "gpu0.process.0.gpu_instance_id = 5\ngpu0.process.0.compute_instance_id = 0\n"
        + "gpu0.process.1.pid = 5151\ngpu0.process.1.used_memory = 2147483648\ngpu0.process.1.graphics = 1\n"
    )
    root = procfs(tmp_path / "proc")
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--path.procfs", str(root))
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    gpu0 = {"gpu": "0", "uuid": "GPU-7d3f9a21-6c4e-4b8a-91f2-0e5d3c7b9a14"}
    mig = {**gpu0, "gpu_instance": "5", "compute_instance": "0", "profile": "2g.10gb"}
    assert value(parsed, "gpu_process_memory_used_bytes", **mig, pid="4242", process="python3", user="root") == GIB
    assert value(parsed, "gpu_process_memory_used_bytes", **gpu0, pid="5151", process="trainer", user="root") == 2 * GIB


def test_slurm_hpc_and_pod_workloads_become_allocations(fakenvml_dir: Path, tmp_path: Path) -> None:
    import os
    import time

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "2").write_text("job-a\njob-b\n")  # GPU 2 holds two HPC jobs
    (jobs / "notes.txt").write_text("ignored: not a GPU index\n")
    os.mkfifo(jobs / "3")  # a FIFO must not hang the exporter
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    root = procfs(tmp_path / "proc")
    gpu0 = {"gpu": "0", "uuid": "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00"}
    gpu2 = {"gpu": "2", "uuid": "GPU-4a1e0c2d-2b7f-4c3a-9e21-5d8f6a0b1c22"}
    started = time.monotonic()
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--path.procfs", str(root),
        "--hpc-job-mapping-dir", str(jobs),
    )  # fmt: skip
    try:  # wait for the event (idle time accumulated on GPU 2), not a fixed time
        parsed = wait_for(
            exporter, lambda p: (value(p, "gpu_allocation_idle_seconds_total", **gpu2, hpc_job="job-a") or 0) > 0.4
        )
        elapsed = time.monotonic() - started
    finally:
        exporter.stop()
    # the process's own cgroups say which Slurm job and which pod it belongs to
    assert value(parsed, "gpu_process_memory_used_bytes", pid="4242", slurm_job="77") == 8 * GIB
    assert value(parsed, "gpu_process_memory_used_bytes", pid="5151", pod_uid=POD_UID) == 4 * GIB
    assert value(parsed, "gpu_allocation_info", **gpu0, slurm_job="77") == 1
    assert value(parsed, "gpu_allocation_info", **gpu2, hpc_job="job-a") == 1
    assert value(parsed, "gpu_allocation_info", **gpu2, hpc_job="job-b") == 1
    assert not [labels for labels in parsed["gpu_allocation_info"] if dict(labels)["gpu"] == "3"]
    # GPU 0 is busy (97%, processes running): not idle; GPU 2 runs no process: idle all along
    assert value(parsed, "gpu_allocation_idle_seconds_total", **gpu0, slurm_job="77") == 0
    idle = value(parsed, "gpu_allocation_idle_seconds_total", **gpu2, hpc_job="job-a")
    assert idle is not None and 0.4 < idle <= elapsed  # never more than the exporter ran
