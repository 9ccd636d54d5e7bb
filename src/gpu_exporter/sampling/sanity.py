"""Physical plausibility of sampled values: what a broken driver returns is dropped, not exported.

Drivers in bad states return sentinels (``0xFFFFFFFF`` utilisation, a GPU at 644245923 °C);
exporting them poisons dashboards and alerts. A value is invalid when its raw vendor value is an
all-ones sentinel, when it lies outside the catalogue row's physical minimum and bound (checked in
:func:`~gpu_exporter.sampling.convert.convert`), or when it contradicts another value of the same
read (memory used above total). Invalid values are counted per metric in
``gpu_exporter_invalid_values_total{field}`` instead.
"""

from __future__ import annotations

from gpu_exporter.catalogue.keys import MEMORY_FREE, MEMORY_TOTAL, MEMORY_USED

#: All-ones values of 32- and 64-bit unsigned fields, which NVML uses as "no value".
SENTINELS = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
_CONSISTENCY = ((MEMORY_USED, MEMORY_TOTAL), (MEMORY_FREE, MEMORY_TOTAL))


def drop_inconsistent(values: dict[str, float], invalid: dict[str, int]) -> None:
    """Remove parts that exceed their whole (memory used or free above total), counting each."""
    for part, whole in _CONSISTENCY:
        if part in values and whole in values and values[part] > values[whole]:
            del values[part]
            invalid[part] = invalid.get(part, 0) + 1
