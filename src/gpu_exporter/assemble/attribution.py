"""The attribution sources the settings ask for, built once for the sampler: /proc and passwd, the
kubelet's pod-resources and ``/pods``, the API server's ResourceSlices and pods, HPC job files, a
scenario's own process names. grpc, httpx2 and the protobufs load only when Kubernetes is asked for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_exporter.attribution.deviceids import GpuIds
from gpu_exporter.attribution.join import Attributor, Kubelet, PodNames, Slices
from gpu_exporter.attribution.procfs import FactsSource
from gpu_exporter.config import Settings

if TYPE_CHECKING:
    from gpu_exporter.attribution.kubeapi import NodePods, ResourceSlices
    from gpu_exporter.attribution.nodecondition import NodeCondition
    from gpu_exporter.sampling.health import Health

log = logging.getLogger(__name__)


def attributor_for(
    settings: Settings, gpus: Callable[[], Sequence[GpuIds]], health: Callable[[], Health] | None = None
) -> Attributor:
    """The attribution the settings ask for; the kubelet source (and grpc) only with ``--kubernetes``.
    ``gpus`` gives the GPUs the sampler knows, to resolve the kubelet's device ids; ``health`` the
    newest health, which ``--kubernetes.node-condition`` reports on the node."""
    kubelet: Kubelet | None = None
    if settings.kubernetes:
        from gpu_exporter.attribution.podresources import PodResources

        extra = frozenset(name.strip() for name in settings.kubernetes_resources.split(",") if name.strip())
        refresh = settings.kubelet_refresh
        kubelet = PodResources(
            settings.pod_resources_socket, refresh, extra, max_age_seconds=max(60.0, 6 * refresh), gpus=gpus
        )
    names: PodNames | None = None
    if settings.kubernetes and settings.kubelet_url:
        from gpu_exporter.attribution.kubeletpods import KubeletPods

        names = KubeletPods(
            settings.kubelet_url, settings.kubelet_token_file, settings.kubelet_ca_file,
            max(30.0, 3 * settings.kubelet_refresh),
            insecure_skip_verify=settings.kubelet_insecure,
        )  # fmt: skip
    slices: Slices | None = None
    api_pods: PodNames | None = None
    if settings.kubernetes:  # httpx2 and the pod-resources protobufs load only here
        slices, api_pods = api_sources(settings)
    scenario_names: FactsSource | None = None
    if settings.backend == "simulate" and not settings.procfs:  # a scenario without a /proc of its own
        from gpu_exporter.simulate.builtins import resolve
        from gpu_exporter.simulate.processes import ScenarioNames

        scenario_names = ScenarioNames(resolve(settings.simulate))
    if settings.node_events and not settings.node_condition:
        log.warning("--kubernetes.node-condition-events: no --kubernetes.node-condition, so no Event is made")
    return Attributor(
        Path(settings.procfs),
        settings.hpc_job_dir,
        kubelet,
        names,
        slices,
        api_pods,
        Path(settings.passwd) if settings.passwd else None,
        scenario_names,
        _node_condition(settings, health) if settings.node_condition and health is not None else None,
    )


def _node_condition(settings: Settings, health: Callable[[], Health]) -> NodeCondition | None:
    """The node-condition reporter, where an API server and a node name are known (else one log line)."""
    from gpu_exporter.attribution.kubeapi import api_url
    from gpu_exporter.attribution.nodecondition import NodeCondition

    url = api_url(settings.kubernetes_api_url, os.environ)
    node = settings.kubernetes_node or os.environ.get("NODE_NAME", "")
    if not url or not node:
        why = "no API server (--kubernetes.api-url)" if not url else "no node name (--kubernetes.node-name, NODE_NAME)"
        log.warning("--kubernetes.node-condition %s: not set, %s", settings.node_condition, why)
        return None
    return NodeCondition(url, settings.kubelet_token_file, settings.kubelet_ca_file, node, settings.node_condition,
                         health, events=settings.node_events)  # fmt: skip


def api_sources(settings: Settings) -> tuple[ResourceSlices | None, NodePods | None]:
    """This node's ResourceSlices and pods sources, where the settings name an API server and a node
    (else one log line saying what is not attributed); listed every three kubelet refreshes."""
    from gpu_exporter.attribution.kubeapi import ApiClient, NodePods, ResourceSlices, api_url
    from gpu_exporter.attribution.podresources import DRA_DRIVERS

    url = api_url(settings.kubernetes_api_url, os.environ)
    node = settings.kubernetes_node or os.environ.get("NODE_NAME", "")
    if not url or not node:
        why = "no API server (--kubernetes.api-url)" if not url else "no node name (--kubernetes.node-name, NODE_NAME)"
        log.warning(
            "kubernetes api: not asked, %s: DRA-allocated GPUs are not attributed (device-plugin allocations are)", why
        )
        return None, None
    api = ApiClient(url, settings.kubelet_token_file, settings.kubelet_ca_file, 5.0)
    every = 3 * settings.kubelet_refresh  # default 30 s: two small lists per node, never per scrape
    slices = ResourceSlices(api, node, DRA_DRIVERS, every, max(180.0, 6 * every))
    return slices, NodePods(api, node, every, max(180.0, 6 * every))
