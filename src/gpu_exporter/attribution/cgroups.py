"""What a process's cgroups say about its workload (``/proc/PID/cgroup``).

Kubernetes: the pod UID and container ID, from every layout kubelets write: cgroup v1 and v2, the
cgroupfs driver (``/kubepods/burstable/pod<uid>/<container id>``) and the systemd driver
(``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/
cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope``; Guaranteed pods have no
QoS level). Slurm: the job id from ``job_<N>`` in the path (``/slurm/uid_1000/job_42/step_0`` on
v1, ``/system.slice/slurmstepd.scope/job_42/step_0/...`` on v2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A pod UID (8-4-4-4-12, dashes or the systemd driver's underscores), or a static pod's 32-hex UID.
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?![0-9a-f])"
)
_CONTAINER = re.compile(r"(?:^|/|-)([0-9a-f]{64})(?:\.scope)?$")
_JOB = re.compile(r"/job_([0-9]+)(?:/|$)")


@dataclass(frozen=True)
class Workload:
    """Empty strings where the cgroups do not say."""

    pod_uid: str = ""
    container_id: str = ""
    slurm_job: str = ""


def parse(text: str) -> Workload:
    """The workload of one ``/proc/PID/cgroup`` file (``hierarchy:controllers:path`` lines)."""
    pod = container = job = ""
    for line in text.splitlines():
        path = line.split(":", 2)[2] if line.count(":") >= 2 else ""
        if not pod and "kubepods" in path:
            match = _POD.search(path)
            if match:
                pod = match.group(1).replace("_", "-")
                found = _CONTAINER.search(path)
                container = found.group(1) if found else container
        if not job:
            found_job = _JOB.search(path)
            job = found_job.group(1) if found_job else ""
    return Workload(pod, container, job)
