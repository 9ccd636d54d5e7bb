"""The control socket: a local Unix socket over which ``gpu-exporter pause`` and ``gpu-exporter resume``
ask the running exporter to step aside (:mod:`gpu_exporter.sampling.pause`) and come back:
:mod:`.protocol` (the one-line JSON messages), :mod:`.server` (the exporter's side), :mod:`.client` (the
subcommands' side)."""
