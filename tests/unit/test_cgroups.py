"""/proc/PID/cgroup → pod UID, container id and Slurm job, for every layout kubelets and Slurm write."""

from __future__ import annotations

import pytest

from gpu_exporter.attribution.cgroups import Workload, parse

UID = "2f8a1c9e-7b3d-4e5f-9a0b-1c2d3e4f5a6b"
CID = "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v1, cgroupfs driver (docker or containerd): /kubepods/<qos>/pod<uid>/<container id>
        (f"11:memory:/kubepods/burstable/pod{UID}/{CID}\n1:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n",
         Workload(UID, CID)),
        # Guaranteed pods have no QoS level
        (f"4:devices:/kubepods/pod{UID}/{CID}\n", Workload(UID, CID)),
        # cgroup v2, systemd driver, containerd
        ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + UID.replace("-", "_")
         + f".slice/cri-containerd-{CID}.scope\n", Workload(UID, CID)),
        # systemd driver, CRI-O and Docker naming
        ("0::/kubepods.slice/kubepods-pod" + UID.replace("-", "_") + f".slice/crio-{CID}.scope\n", Workload(UID, CID)),
        ("5:pids:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + UID.replace("-", "_")
         + f".slice/docker-{CID}.scope\n", Workload(UID, CID)),
        # a static pod: its UID is 32 hex digits
        ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + "f" * 32
         + f".slice/cri-containerd-{CID}.scope\n", Workload("f" * 32, CID)),
        # the pod's own cgroup (no container yet): the pod is known, the container is not
        (f"0::/kubepods/burstable/pod{UID}\n", Workload(UID, "")),
        # Slurm: cgroup v1 and v2
        ("7:memory:/slurm/uid_1000/job_4242/step_0/task_0\n", Workload(slurm_job="4242")),
        ("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n", Workload(slurm_job="77")),
        # neither: a login session, a system service, garbage
        ("0::/user.slice/user-1000.slice/session-3.scope\n", Workload()),
        ("0::/system.slice/nvidia-persistenced.service\n", Workload()),
        ("not a cgroup file\n\x00\xff", Workload()),
        ("", Workload()),
    ],
)  # fmt: skip
def test_workload_from_each_cgroup_layout(text: str, expected: Workload) -> None:
    assert parse(text) == expected
