"""The one-shot commands for a person at the box: :mod:`.snapshot` (``gpu-exporter snapshot``, the
terminal view of what ``/metrics`` would serve) and :mod:`.doctor` (``gpu-exporter doctor``, what is
wrong on this host and the fix)."""
