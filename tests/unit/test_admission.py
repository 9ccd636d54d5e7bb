"""The admission rules (gpu_exporter.http.admission) on plain objects and a given clock."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.http.admission import FRESH_GRACE, Admission, share, source


@dataclass(eq=False)
class Conn:
    source: str
    accepted: float
    idle_since: float | None = None
    served: bool = False
    refused: bool = False


def _fill(admission: Admission, address: str, count: int, at: float, **kwargs: object) -> list[Conn]:
    made = [Conn(address, at, idle_since=at, **kwargs) for _ in range(count)]  # type: ignore[arg-type]
    for conn in made:
        admission.add(conn)
    return made


def test_source_counts_ipv6_by_its_64_and_mapped_ipv4_as_ipv4() -> None:
    assert source(("10.0.0.7", 5000)) == "10.0.0.7"
    assert source(("::ffff:10.0.0.7", 5000, 0, 0)) == "10.0.0.7"
    assert source(("2001:db8:1:2:aaaa::1", 1, 0, 0)) == source(("2001:db8:1:2:ffff::9", 1, 0, 0)) == "2001:db8:1:2::/64"
    assert source(("2001:db8:1:3::1", 1, 0, 0)) != source(("2001:db8:1:2::1", 1, 0, 0))
    assert source(None) == "?"


def test_share_is_a_quarter_of_the_cap_at_least_four() -> None:
    assert share(512) == 128 and share(32) == 8 and share(8) == 4


def test_an_address_at_its_share_replaces_its_oldest_idle_or_is_refused() -> None:
    admission = Admission()
    old = _fill(admission, "a", 128, at=0.0)
    assert admission.admit("a", 512, now=10.0) == (True, old[0])  # silent for 10 s: the oldest goes
    admission = Admission()
    fresh = _fill(admission, "a", 128, at=10.0)
    assert admission.admit("a", 512, now=10.0 + FRESH_GRACE / 2) == (False, None)  # all still sending
    fresh[5].refused = True
    assert admission.admit("a", 512, now=10.1) == (True, fresh[5])
    busy = Admission()
    conns = _fill(busy, "a", 128, at=0.0)
    for conn in conns:
        conn.idle_since, conn.served = None, True  # every one is answering a request
    assert busy.admit("a", 512, now=10.0) == (False, None)
    conns[9].idle_since = 9.0  # one waits for its next request
    assert busy.admit("a", 512, now=10.0) == (True, conns[9])
    assert busy.admit("b", 512, now=10.0) == (True, None)  # another address: room below the cap


def test_at_the_cap_a_new_address_is_admitted_and_the_biggest_holder_gives_way() -> None:
    admission = Admission()
    small = _fill(admission, "small", 2, at=0.0)
    big = _fill(admission, "big", 6, at=5.0)
    for conn in big:
        conn.idle_since = None  # busy, and still it gives way: a new address is always admitted
    assert admission.admit("new", 8, now=5.01) == (True, big[0])
    assert admission.admit("small", 8, now=5.01) == (True, big[0])
    assert admission.admit("big", 8, now=5.01) == (False, None)  # the biggest holder makes room from its own
    big[3].refused = True
    assert admission.admit("new", 8, now=5.01) == (True, big[3])  # a failed login goes first
    admission.discard(big[3])
    admission.discard(big[3])  # twice: no harm
    assert admission.count == 7 and admission.held("big") == 5 and admission.admit("new", 8, 6.0) == (True, None)
    for conn in small:
        admission.discard(conn)
    assert "small" not in admission.by_source
    assert admission.biggest() is big[0]
