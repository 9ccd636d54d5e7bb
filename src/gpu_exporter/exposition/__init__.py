"""Exposition: from a sampler snapshot to the bytes on ``/metrics``.

:mod:`.families` builds metric families from a cycle in one loop over rows and entities, :mod:`.render`
is the native renderer (families per snapshot), :mod:`.naming` the naming profiles (native,
dcgm-exporter) and :mod:`.encoder` the one text/OpenMetrics encoder with its bounded label cache.
"""
