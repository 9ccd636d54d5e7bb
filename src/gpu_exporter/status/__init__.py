"""What a person at the box looks at: the status page, its JSON and ``gpu-exporter snapshot``.

:mod:`.view` turns a sampler :class:`~gpu_exporter.sampling.snapshot.Snapshot` into plain, JSON-ready cards
(one per GPU and MIG instance), :mod:`.history` keeps a bounded in-memory trail of a few values per
card for sparklines, :mod:`.page` renders the HTML and :mod:`.terminal` the one-shot text view.
"""
