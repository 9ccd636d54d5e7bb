"""``python -m gpu_exporter``: the same entry point as the ``gpu-exporter`` command."""

from gpu_exporter.cli import main

raise SystemExit(main())
