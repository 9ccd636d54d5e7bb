"""The HTTP side, which knows nothing of GPUs: :mod:`.server` (sockets, connection limits, TLS,
signals), :mod:`.exchange` (one request/response exchange), :mod:`.lifespan` (the ASGI lifespan),
:mod:`.auth` (basic auth) and :mod:`.webconfig` (the Prometheus-style web config file)."""
