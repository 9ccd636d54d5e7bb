"""GPU backends. Vendor libraries are imported only inside their own backend module; the registry
(:mod:`.registry`) names each backend, its options and how it is built, and the composition root
(:mod:`gpu_exporter.assemble.backends`) chooses one from the settings."""
