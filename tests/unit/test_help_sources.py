"""Each HELP text names the NVML call the backend actually makes: values NVML offers as fields are read
in the GPU's one nvmlDeviceGetFieldValues call (power said nvmlDeviceGetPowerUsage, which does not run)."""

from __future__ import annotations

from gpu_exporter.backends.nvml.fields import _LANE_FIELDS, _SCOPED_LINK_FIELDS, DEVICE_FIELDS
from gpu_exporter.catalogue.vocabulary import READ_AS_FIELD

_FIELDS = "nvmlDeviceGetFieldValues"


def test_the_catalogues_field_list_is_the_backends() -> None:
    backend = {key for key in (*DEVICE_FIELDS, *_SCOPED_LINK_FIELDS) if key[0] != _FIELDS}
    backend |= {("nvmlDeviceGetNvLinkErrorCounter", selector) for selector in _LANE_FIELDS}
    assert backend == READ_AS_FIELD
