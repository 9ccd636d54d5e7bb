"""gpu-exporter: a Prometheus exporter for NVIDIA GPUs."""

__version__ = "0.1.0"
