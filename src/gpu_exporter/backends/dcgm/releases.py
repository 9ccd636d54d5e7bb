"""Which field ids each DCGM release knows, and the release a host engine runs.

A DCGM host engine refuses a whole field group when any id in it is missing from its own field
table (``DcgmFieldGroupManager::AddFieldGroup`` answers DCGM_ST_BADPARAM), so the backend asks
only for ids the connected engine knows. The first answer is the engine's own library, per id
(``DcgmFieldGetById``, see :meth:`~gpu_exporter.backends.dcgm.adapter.PydcgmAdapter.known_fields`);
this table is what the backend falls back on when that call is not there, by the release
``dcgmVersionInfo`` reports. Where the library and a standalone engine of another release
disagree, the engine's BADPARAM is narrowed down to the refused ids (:mod:`.watches`).

The facts: the ids registered by ``DcgmFieldsPopulateFieldTableWithFormatting`` in
``dcgmlib/src/dcgm_fields.cpp`` at each release tag of NVIDIA/DCGM (read there, written here as
the ranges each release added; no release removed an id from 3.3 to 4.6). DCGM 4.6.1: go-dcgm
v1.4611.0's copy of its ``dcgm_fields.h`` (NVIDIA/go-dcgm, "add DCGM 4.6.1 support") adds the base-unit
fields 1600-1612 and no other id. DCGM 4.7.0: its sources are not readable here; NVIDIA's "Field
Identifiers" page for it, as a third-party guide quotes it (github.com/jackliusr/research,
nvidia_dcgm_guide.md §4.2: the base-unit fields 1612-1650, ``DCGM_FI_MAX_FIELDS`` 1651), gives the ids
1613-1650 (ratios, throttle seconds, framebuffer, C2C and NVLink bytes). DCGM 4.8.0: its notes rename
fields (``DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND``) but list no new id, so an engine of 4.8 is taken to
know 4.7's ids (:func:`known_ids` never assumes more than is listed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: (release, the id ranges it added to the one before), oldest first. 3.3.5 and 3.3.7 know the
#: same ids; 4.5.0 to 4.5.3 too.
_ADDED: tuple[tuple[tuple[int, int, int], tuple[tuple[int, int], ...]], ...] = (
    (
        (3, 3, 5),
        (
            (1, 5), (50, 63), (65, 77), (80, 93), (100, 102), (110, 115), (120, 120), (130, 130), (140, 140),
            (150, 152), (155, 164), (190, 191), (200, 207), (210, 211), (220, 221), (230, 230), (235, 238),
            (240, 247), (250, 254),
            (285, 287), (300, 301), (310, 333), (385, 396), (400, 489), (491, 496), (500, 513), (520, 534),
            (701, 707), (780, 816), (856, 878), (1001, 1033), (1040, 1075), (1100, 1104), (1110, 1112),
            (1120, 1120), (1130, 1131), (1140, 1141),
        ),
    ),
    ((3, 3, 9), ((1132, 1133),)),
    (
        (4, 0, 0),
        ((94, 94), (165, 167), (170, 173), (350, 362), (497, 499), (817, 824), (1034, 1034), (1200, 1215)),
    ),
    (
        (4, 1, 1),
        ((153, 153), (334, 345), (571, 577), (825, 843), (879, 897), (1076, 1079), (1300, 1310)),
    ),
    ((4, 2, 3), ((346, 346), (1216, 1219), (1400, 1424))),
    ((4, 3, 1), ((64, 64),)),
    ((4, 4, 1), ((580, 592), (1080, 1083), (1425, 1442))),
    ((4, 4, 2), ((174, 174), (1501, 1503))),
    ((4, 5, 0), ((6, 6), (363, 363), (1220, 1220), (1507, 1509), (1523, 1523))),
    ((4, 6, 0), ((175, 175), (1084, 1096), (1524, 1533))),
    ((4, 6, 1), ((1600, 1612),)),
    ((4, 7, 0), ((1613, 1650),)),
)  # fmt: skip

Version = tuple[int, int, int]


def _tables() -> dict[Version, frozenset[int]]:
    known: set[int] = set()
    out = {}
    for version, ranges in _ADDED:
        for first, last in ranges:
            known.update(range(first, last + 1))
        out[version] = frozenset(known)
    return out


#: Release → every field id its engine knows.
KNOWN: dict[Version, frozenset[int]] = _tables()
OLDEST: Version = _ADDED[0][0]
NEWEST: Version = _ADDED[-1][0]


def parse_version(text: str) -> Version | None:
    """``(4, 4, 2)`` from ``dcgmVersionInfo``'s build string (``version:4.4.2;arch:x86_64;...``) or
    a bare ``4.4.2``; None when there is no version in it."""
    match = re.search(r"(?:^|[;\s:])(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def known_ids(version: Version) -> frozenset[int]:
    """The ids of the newest listed release not newer than ``version``: an unlisted patch release
    is taken to know what its predecessor knew (never more); a release older than 3.3.5 as 3.3.5;
    one newer than the newest listed as the newest (its additions stay unasked until listed)."""
    best = OLDEST
    for listed in KNOWN:
        if listed <= version:
            best = listed
    return KNOWN[best]


def unknown(field_ids: Iterable[int], known: frozenset[int]) -> list[int]:
    """The ids of ``field_ids`` not in ``known``, sorted."""
    return sorted({int(field_id) for field_id in field_ids} - known)


def text(version: Version | None) -> str:
    return "an unknown release" if version is None else ".".join(map(str, version))


def id_ranges(field_ids: Iterable[int]) -> str:
    """``94, 571-577, 1507`` for logs."""
    runs: list[list[int]] = []
    for field_id in sorted(set(field_ids)):
        if runs and runs[-1][1] == field_id - 1:
            runs[-1][1] = field_id
        else:
            runs.append([field_id, field_id])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
