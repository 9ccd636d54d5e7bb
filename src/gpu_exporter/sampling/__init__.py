"""Sampling: the cycle that reads every backend in the background and leaves an immutable snapshot.

:mod:`.sampler` runs the cycle; :mod:`.roots` keeps per-root state (one GPU and what hangs off it, or
the fabric) and :mod:`.worker` / :mod:`.readpool` the threads that read them (a hung read keeps only its
own). The backend-neutral stages run in this order for every backend: :mod:`.plan` (which rows are due:
the only place cadence is read), :mod:`.memo` (unsupported rows, asked again), :mod:`.convert` (base
units, plausibility by :mod:`.sanity`), :mod:`.derive` (integrators and windows), :mod:`.events` (Xid and
ECC tallies) and :mod:`.processes`; :mod:`.snapshot` is what the cycle leaves for exposition and status.
"""
