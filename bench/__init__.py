"""Benchmark harness: gpu-exporter against nvitop-exporter and a static-response ceiling.

Run it from the repository root with the project venv: ``.venv/bin/python -m bench.run`` (see
``--help`` and BENCHMARKS.md). It is a program, not a test suite: it measures and writes down.
"""
