"""The health model's judgement as plain data for the status JSON (``/api/v1/status``), the page and
``snapshot``: the node's verdict and each GPU's, in words (``pass``, ``warn``, ``fail``; the action's
name), with the findings behind them. ``gpu-exporter check`` reads the node's part."""

from __future__ import annotations

from typing import Any

from gpu_exporter.sampling.health import STATUS_NAMES, GpuHealth, Health


def gpu_health(gpu: GpuHealth) -> dict[str, Any]:
    """One GPU: its status, action and reason, and each finding."""
    return {
        "status": STATUS_NAMES[gpu.status],
        "action": gpu.action,
        "reason": gpu.reason,
        "subsystems": list(gpu.checked),
        "findings": [
            {"subsystem": f.subsystem, "status": STATUS_NAMES[f.status], "action": f.action, "reason": f.reason}
            for f in gpu.findings
        ],
    }


def node_health(health: Health) -> dict[str, Any]:
    """The node: ``status`` is ``unknown`` while the backend has not answered; ``problems`` one line per
    GPU that needs something, worst first (``GPU 1: <reason>: <action>``), then the missing GPUs."""
    return {
        "status": STATUS_NAMES[health.status] if health.known else "unknown",
        "action": health.action if health.known else "none",
        "expected_gpus": health.expected,
        "present_gpus": health.present if health.known else None,
        "missing_gpus": health.missing if health.known else None,
        "problems": health.problems() if health.known else [],
    }
