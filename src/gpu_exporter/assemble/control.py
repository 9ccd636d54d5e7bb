"""The pause sources of the daemon: its control socket (``--control.socket``) and, on Kubernetes, this
node's labels (one reader of the node): the pause label (``--kubernetes.node-pause``), feeding one
:class:`~gpu_exporter.sampling.pause.Pauses` with the socket, and the expected GPU count
(``--kubernetes.expected-gpus-label``), feeding the sampler's :class:`~gpu_exporter.sampling.inventory.ExpectedGpus`."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from gpu_exporter.config import Settings
from gpu_exporter.control.nodelabel import LabelReader, NodeLabelPause, NodeLabels
from gpu_exporter.control.server import ControlServer
from gpu_exporter.options import parse_duration
from gpu_exporter.sampling.inventory import ExpectedGpus
from gpu_exporter.sampling.pause import MAX_SECONDS, Pauses

log = logging.getLogger(__name__)


def control_server(settings: Settings, pauses: Pauses) -> ControlServer | None:
    """The control socket where one is asked for (the default's path failing is info, not a warning: an
    unprivileged container has no /run/gpu-exporter unless one is mounted)."""
    if not settings.control_socket:
        return None
    return ControlServer(settings.control_socket, pauses, asked=settings.control_socket != Settings().control_socket)


def node_labels(settings: Settings, pauses: Pauses, inventory: ExpectedGpus) -> NodeLabels | None:
    """The reader of this node's labels where one of them is asked for (the pause label, the expected GPU
    count) and an API server and node name are known (else one line)."""
    asked = [name for name, on in (("--kubernetes.node-pause", settings.kubernetes_node_pause),
             ("--kubernetes.expected-gpus-label", bool(settings.expected_gpus_label))) if on]  # fmt: skip
    if not asked:
        return None
    from gpu_exporter.attribution.kubeapi import ApiClient, api_url

    url = api_url(settings.kubernetes_api_url, os.environ)
    node = settings.kubernetes_node or os.environ.get("NODE_NAME", "")
    if not url or not node:
        why = "no API server (--kubernetes.api-url)" if not url else "no node name (--kubernetes.node-name, NODE_NAME)"
        log.warning("%s: %s, so the node's labels are not read", " and ".join(asked), why)
        return None
    stream = ApiClient(url, settings.kubelet_token_file, settings.kubelet_ca_file, 5.0).stream()

    def fetch() -> dict[str, Any]:
        return stream.get(f"/api/v1/nodes/{node}", {})

    def duration(value: str) -> float:
        return parse_duration(value, 1.0, MAX_SECONDS)

    readers: list[LabelReader] = []
    if settings.kubernetes_node_pause:
        readers.append(NodeLabelPause(pauses, duration))
    if settings.expected_gpus_label:
        label = settings.expected_gpus_label

        def expected(labels: Mapping[str, str], _annotations: Mapping[str, str]) -> str | None:
            return inventory.label_seen(labels.get(label))

        readers.append(expected)
    return NodeLabels(fetch, readers)
