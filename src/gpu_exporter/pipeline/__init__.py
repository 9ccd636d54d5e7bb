"""The backend-neutral sampling pipeline, one module per stage: :mod:`.plan` (which rows are due:
the only place cadence is read), :mod:`.memo` (unsupported rows, asked again), :mod:`.convert`
(base units, plausibility), :mod:`.derive` (integrators and windows) and :mod:`.events` (Xid and
ECC tallies). The sampler runs them in that order for every backend."""
