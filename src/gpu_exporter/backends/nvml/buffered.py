"""Rows read from the driver's sample buffers (:mod:`.samples`) instead of their point calls: each
type once per read, its samples handed to the pipeline, the latest as the value, and a type the
driver keeps no buffer of left to its point call (remembered, logged once)."""

from __future__ import annotations

import logging
import time

import pynvml

from gpu_exporter.backends.base import DeviceIdentity, DeviceLost, RawReading
from gpu_exporter.backends.nvml.readers import Handle
from gpu_exporter.backends.nvml.rows import Row
from gpu_exporter.backends.nvml.samples import BUFFERED, NO_SAMPLES, REDUCED, SampleBuffers, Samples, reduce
from gpu_exporter.backends.nvml.samples import CALL as SAMPLES_CALL
from gpu_exporter.model import Entity

log = logging.getLogger(__name__)


class BufferedReads:
    """The sample-buffer side of one NVML backend's reads."""

    def __init__(self) -> None:
        self.buffers = SampleBuffers()

    def take(
        self,
        reading: RawReading,
        gpu: Entity,
        device: DeviceIdentity,
        handle: Handle,
        rows: list[Row],
        sampled: frozenset[str] | None,
    ) -> list[Row]:
        """Rows the driver keeps samples of, read from its buffers (each type once per read): the latest
        is the row's value, and for the rows in ``sampled`` (whose samples the pipeline integrates; None: all) the
        samples since the last seen go to ``reading.samples``; the
        ``nvmlDeviceGetSamples`` rows are reduced from them (peak power, SM clock while busy). Returns
        the rows left for point reads: those of a type without a buffer (remembered, logged once) or
        whose call failed this time. A read that finds no new sample keeps the newest one seen as the
        value and hands over no samples (nothing to integrate: reads may come faster than samples)."""
        fetched: dict[int, Samples | None] = {}

        def fetch(kind: int, row: Row) -> Samples | None:
            """The type's samples of this read; None where the driver keeps none (remembered)."""
            if kind not in fetched:
                fetched[kind] = None
                if self.buffers.supported(device.uuid, kind):
                    started = time.perf_counter()
                    fetched[kind] = self._fetch(gpu, device, handle, kind, row)
                    reading.spent(row.spec.collector, time.perf_counter() - started)
            return fetched[kind]

        left = []
        out = reading.raw.setdefault(gpu, {})
        for row in rows:
            if row.source.call == SAMPLES_CALL:
                kinds = REDUCED.get(row.source.selector, ())
                series = [fetch(kind, row) for kind in kinds]
                if not kinds or not all(self.buffers.supported(device.uuid, kind) for kind in kinds):
                    reading.unsupported.append((gpu, row.key, f"{SAMPLES_CALL} keeps no samples of that type"))
                    continue
                if any(samples is None for samples in series):
                    continue  # a call failed this time
                value = reduce(row.source.selector, tuple(samples or NO_SAMPLES for samples in series))
                if value is not None:
                    out[row.key] = value
                continue
            kind = BUFFERED.get((row.source.call, row.source.selector))
            samples = None if kind is None else fetch(kind, row)
            latest = None if kind is None or samples is None else self.buffers.latest(device.uuid, kind)
            if samples is None or latest is None:
                left.append(row)
                continue
            out[row.key] = latest
            if sampled is None or row.key in sampled:
                stamps, values = samples
                reading.samples.setdefault(gpu, {})[row.key] = tuple(
                    zip([t / 1e6 for t in stamps], values, strict=True)
                )
        return left

    def _fetch(self, gpu: Entity, device: DeviceIdentity, handle: Handle, kind: int, row: Row) -> Samples | None:
        """One ``nvmlDeviceGetSamples``: the new samples ([] when none is new), or None when the driver
        keeps no buffer of ``kind`` (remembered) or the call failed this time. Raises DeviceLost."""
        try:
            samples = self.buffers.read(device.uuid, handle, kind)
            why = "its buffer is empty"
        except pynvml.NVMLError_GpuIsLost as err:
            raise DeviceLost(f"{gpu.uid}: {err}") from err
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as err:
            samples, why = None, str(err)
        except pynvml.NVMLError as err:
            log.debug("%s nvmlDeviceGetSamples(%d) failed: %s", gpu.uid, kind, err)
            return None
        if samples is None:
            self.buffers.unsupported(device.uuid, kind)
            log.debug(  # nothing is missing (the point call answers): a detail, not news at start-up
                "GPU %d (%s): the driver keeps no samples of type %d (%s): %s is read by its point call",
                device.index, device.name, kind, why, row.spec.name,
            )  # fmt: skip
        return samples
