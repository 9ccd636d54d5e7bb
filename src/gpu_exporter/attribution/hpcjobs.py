"""dcgm-exporter's HPC job mapping directory (``--hpc-job-mapping-dir``): a workload manager writes
one file per GPU, named by the GPU's index (``0``) or index and GPU instance (``0.3``, a MIG
instance), holding the ids of the jobs using it, one per line. An empty or missing file means no
job. The directory is scanned at most once every :data:`RESCAN_EVERY` seconds, whatever the number
of GPUs asking (a directory of 20,000 files cost 90 % of a core when every GPU scanned it every
cycle); files are re-read only when their modification time changes; oversized
files and names that are not an index are ignored."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

_NAME = re.compile(r"^([0-9]+)(?:\.([0-9]+))?$")
_MAX_BYTES = 65536
_MAX_JOBS = 64
RESCAN_EVERY = 1.0


class JobMapping:
    """Jobs by (GPU index, GPU instance or None), from one directory; safe to call from any thread."""

    def __init__(self, directory: str) -> None:
        self._dir = Path(directory)
        self._cache: dict[str, tuple[int, tuple[str, ...]]] = {}  # file name → (mtime ns, jobs)
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._scanned: tuple[float, dict[tuple[int, int | None], tuple[str, ...]]] | None = None

    def jobs(self) -> dict[tuple[int, int | None], tuple[str, ...]]:
        """Every GPU (and MIG instance) with jobs, as scanned within the last :data:`RESCAN_EVERY` s."""
        with self._lock:
            now = time.monotonic()
            if self._scanned is not None and now - self._scanned[0] < RESCAN_EVERY:
                return self._scanned[1]
            out = self._scan()
            self._scanned = (time.monotonic(), out)
            return out

    def _scan(self) -> dict[tuple[int, int | None], tuple[str, ...]]:
        out: dict[tuple[int, int | None], tuple[str, ...]] = {}
        try:
            entries = list(os.scandir(self._dir))
        except OSError as err:
            self._warn("dir", f"HPC job mapping directory {self._dir} cannot be read ({err}); no hpc_job labels")
            return out
        seen: set[str] = set()
        for entry in entries:
            match = _NAME.match(entry.name)
            if match is None:
                continue
            seen.add(entry.name)
            jobs = self._read(entry)
            if jobs:
                out[(int(match.group(1)), int(match.group(2)) if match.group(2) else None)] = jobs
        for name in set(self._cache) - seen:
            del self._cache[name]
        return out

    def _read(self, entry: os.DirEntry[str]) -> tuple[str, ...]:
        try:
            stat = entry.stat()
            cached = self._cache.get(entry.name)
            if cached is not None and cached[0] == stat.st_mtime_ns:
                return cached[1]
            if not entry.is_file() or stat.st_size > _MAX_BYTES:
                self._warn(entry.name, f"{entry.path}: not a regular file under {_MAX_BYTES} bytes; ignored")
                return ()
            with open(entry.path, "rb") as file:
                text = file.read(_MAX_BYTES).decode("utf-8", "replace")
        except OSError:
            return ()
        jobs = tuple(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))[:_MAX_JOBS]
        self._cache[entry.name] = (stat.st_mtime_ns, jobs)
        return jobs

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)
