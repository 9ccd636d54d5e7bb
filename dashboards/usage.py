"""The "who used the GPUs" dashboard: the exporter's ledger (docs/attribution.md) summed per namespace,
pod, Slurm job and HPC job over the time range, and each allocation's share now. ``generate.py`` renders
it with the dashboards of ``content.py``, whose helpers and conventions it uses."""

from __future__ import annotations

from content import GPU, JOBS, POD_RESOURCES_ONLY, PODS, RI, DashboardSpec, Query, RowSpec, g, note, table, ts

HOURS = "3600"
KWH = "3.6e6"  # joules in a kilowatt-hour
JOB_LEGEND = "{{slurm_job}}{{hpc_job}}"
SPLIT = (
    "On a shared GPU the ledger splits the GPU's busy time by its processes' SM shares and its idle energy by "
    "allocated time, so the parts never count a GPU twice (docs/attribution.md)."
)


def over_range(metric: str, by: str, allocations: str, per: str) -> str:
    """``metric``'s increase over the dashboard's time range, summed ``by`` labels, in ``per`` units, largest first."""
    return f"sort_desc(sum by ({by}) (increase({g(metric, allocations)}[$__range])) / {per})"


def per_second(metric: str, by: str, allocations: str) -> str:
    return f"sum by ({by}) (rate({g(metric, allocations)}[{RI}]))"


USAGE = DashboardSpec(
    "gpu-usage",
    "gpu-exporter-usage",
    "GPU / Who used the GPUs",
    "GPU-hours, busy GPU-hours, energy and idle-while-allocated time per namespace, pod, Slurm and HPC job over "
    "the time range, split fairly on shared GPUs; each allocation's share now.",
    (
        RowSpec("Jobs over the time range", (
            note("Reading this dashboard", """
*GPU-hours*: the time allocations held GPUs (a GPU shared by two allocations gives each half). *Busy*:
their part of the GPUs' busy time. *kWh*: their part of the GPUs' energy. *Idle while allocated*: time
their GPU ran nothing or stayed below 5 %. Sums cover the dashboard's time range; per day, the recording
rules (group gpu-allocations) say the same.""", "gpuallocatedidle"),
            table("Jobs by GPU-hours", f"GPU-hours, busy GPU-hours and kWh of each Slurm or HPC job over the time "
                  f"range, most GPU-hours first. {SPLIT}", "none",
                  over_range("gpu_allocation_gpu_seconds_total", "slurm_job, hpc_job", JOBS, HOURS),
                  over_range("gpu_allocation_busy_seconds_total", "slurm_job, hpc_job", JOBS, HOURS),
                  over_range("gpu_allocation_energy_joules_total", "slurm_job, hpc_job", JOBS, KWH), width=9),
            table("Jobs by idle GPU-hours", "GPU-hours each Slurm or HPC job held its GPUs idle (no compute "
                  "process, or below 5 %) over the time range, most first. Runbook: gpuallocatedidle.", "none",
                  over_range("gpu_allocation_idle_seconds_total", "slurm_job, hpc_job", JOBS, HOURS), width=9),
        )),
        RowSpec("Namespaces and pods over the time range (Kubernetes pod-resources)", (
            table("Namespaces by GPU-hours", f"GPU-hours, busy GPU-hours and kWh of each namespace over the time "
                  f"range, most GPU-hours first. {POD_RESOURCES_ONLY}", "none",
                  over_range("gpu_allocation_gpu_seconds_total", "namespace", PODS, HOURS),
                  over_range("gpu_allocation_busy_seconds_total", "namespace", PODS, HOURS),
                  over_range("gpu_allocation_energy_joules_total", "namespace", PODS, KWH), width=8),
            table("Namespaces by kWh", f"Energy of each namespace's allocations over the time range in kWh, most "
                  f"first. {POD_RESOURCES_ONLY}", "none",
                  over_range("gpu_allocation_energy_joules_total", "namespace", PODS, KWH), width=8),
            table("Namespaces by idle GPU-hours", f"GPU-hours each namespace held GPUs idle over the time range. "
                  f"{POD_RESOURCES_ONLY}", "none",
                  over_range("gpu_allocation_idle_seconds_total", "namespace", PODS, HOURS), width=8),
            table("Pods by GPU-hours", f"GPU-hours, busy GPU-hours and kWh of each pod over the time range. "
                  f"{POD_RESOURCES_ONLY}", "none",
                  over_range("gpu_allocation_gpu_seconds_total", "namespace, pod", PODS, HOURS),
                  over_range("gpu_allocation_busy_seconds_total", "namespace, pod", PODS, HOURS),
                  over_range("gpu_allocation_energy_joules_total", "namespace, pod", PODS, KWH), width=24),
        )),
        RowSpec("Over time", (
            ts("Busy GPUs per job", f"Busy GPU-equivalents of each Slurm or HPC job (1 is one GPU busy all the "
               f"time). {SPLIT}", "none",
               Query(per_second("gpu_allocation_busy_seconds_total", "slurm_job, hpc_job", JOBS), JOB_LEGEND),
               min=0, width=12),
            ts("Power per job", f"Average power of each Slurm or HPC job's part of its GPUs (watts). {SPLIT}", "watt",
               Query(per_second("gpu_allocation_energy_joules_total", "slurm_job, hpc_job", JOBS), JOB_LEGEND),
               min=0, width=12),
            ts("Unattributed busy time and power", "Per GPU: the busy fraction and the power no allocation "
               "accounts for (processes of no known allocation, activity no per-process sample explains). Near 0 "
               "where every GPU's work belongs to a scheduler's allocation.", "none",
               Query(f"rate({g('gpu_unattributed_busy_seconds_total')}[{RI}])", f"{GPU} busy"),
               Query(f"rate({g('gpu_unattributed_energy_joules_total')}[{RI}]) / 1000", f"{GPU} kW"),
               min=0, width=24),
        )),
        RowSpec("Each allocation now", (
            table("Allocations now", "Each allocation (pod container, Slurm or HPC job) on each GPU: its share "
                  "of the GPU's time, of its busy time and of its power over the last interval, the memory its "
                  "processes hold (empty where the exporter knows none of its processes) and, on GPUs with NVML "
                  "accounting mode on (nvidia-smi -am 1), the most one of them has held since it started "
                  "(empty elsewhere: the memory column is then only what the last read saw).", "none",
                  f"rate({g('gpu_allocation_gpu_seconds_total')}[{RI}])",
                  f"rate({g('gpu_allocation_busy_seconds_total')}[{RI}])",
                  f"rate({g('gpu_allocation_energy_joules_total')}[{RI}])",
                  g("gpu_allocation_memory_used_bytes"), g("gpu_allocation_memory_peak_bytes"), width=24),
        )),
    ),
)  # fmt: skip
