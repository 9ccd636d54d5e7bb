"""The pause sources of the daemon: its control socket (``--control.socket``) and, on Kubernetes, this
node's pause label (``--kubernetes.node-pause``), both feeding one :class:`~gpu_exporter.sampling.pause.Pauses`."""

from __future__ import annotations

import logging
import os
from typing import Any

from gpu_exporter.config import Settings
from gpu_exporter.control.nodelabel import NodeLabelPause
from gpu_exporter.control.server import ControlServer
from gpu_exporter.options import parse_duration
from gpu_exporter.sampling.pause import MAX_SECONDS, Pauses

log = logging.getLogger(__name__)


def control_server(settings: Settings, pauses: Pauses) -> ControlServer | None:
    """The control socket where one is asked for (the default's path failing is info, not a warning: an
    unprivileged container has no /run/gpu-exporter unless one is mounted)."""
    if not settings.control_socket:
        return None
    return ControlServer(settings.control_socket, pauses, asked=settings.control_socket != Settings().control_socket)


def node_pause(settings: Settings, pauses: Pauses) -> NodeLabelPause | None:
    """The node-label pause where asked for and an API server and node name are known (else one line)."""
    if not settings.kubernetes_node_pause:
        return None
    from gpu_exporter.attribution.kubeapi import ApiClient, api_url

    url = api_url(settings.kubernetes_api_url, os.environ)
    node = settings.kubernetes_node or os.environ.get("NODE_NAME", "")
    if not url or not node:
        why = "no API server (--kubernetes.api-url)" if not url else "no node name (--kubernetes.node-name, NODE_NAME)"
        log.warning("--kubernetes.node-pause: %s, so the node's pause label is not read", why)
        return None
    stream = ApiClient(url, settings.kubelet_token_file, settings.kubelet_ca_file, 5.0).stream()

    def fetch() -> dict[str, Any]:
        return stream.get(f"/api/v1/nodes/{node}", {})

    def duration(value: str) -> float:
        return parse_duration(value, 1.0, MAX_SECONDS)

    return NodeLabelPause(fetch, pauses, duration)
