"""Xid and ECC tallies in process: counted once per event by GPU UUID, only growing, untouched by
other GPUs; a tally handed out is a copy later events do not change; the recent Xids kept for
windowed counts reach back an hour from the newest and hold at most a thousand."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter.backends.base import Event
from gpu_exporter.sampling.events import RECENT_SECONDS, EventTallies, XidTally

A, B = "GPU-aaaa", "GPU-bbbb"


def test_a_gpu_without_events_has_zero_counts_and_no_last_xid() -> None:
    assert EventTallies().tally(A) == XidTally({}, {}, None, None, ())


def test_xids_and_ecc_events_are_counted_by_code_type_and_uuid() -> None:
    tallies = EventTallies()
    tallies.add([Event(A, 100.0, xid=79), Event(A, 101.0, xid=13), Event(B, 102.0, xid=13)])
    tallies.add([Event(A, 103.0, xid=13), Event(A, 104.0, ecc="single_bit"), Event(B, 105.0, ecc="double_bit")])
    tallies.add([Event(A, 106.0, ecc="single_bit")])
    a, b = tallies.tally(A), tallies.tally(B)
    assert a.xid == {79: 1, 13: 2} and a.ecc == {"single_bit": 2}
    assert (a.last_xid, a.last_xid_at) == (13, 103.0)  # an ECC event is no Xid
    assert a.recent == ((100.0, 79), (101.0, 13), (103.0, 13))
    assert b == XidTally({13: 1}, {"double_bit": 1}, 102.0, 13, ((102.0, 13),))


def test_a_tally_handed_out_is_not_changed_by_later_events() -> None:
    tallies = EventTallies()
    tallies.add([Event(A, 1.0, xid=48)])
    before = tallies.tally(A)
    tallies.add([Event(A, 2.0, xid=48), Event(A, 3.0, ecc="double_bit")])
    assert before == XidTally({48: 1}, {}, 1.0, 48, ((1.0, 48),))  # the snapshot that holds it is immutable
    assert tallies.tally(A).xid == {48: 2}
    assert tallies.tally(A) is tallies.tally(A)  # unchanged since: the same tally, not a copy per cycle


def test_recent_xids_reach_back_an_hour_from_the_newest() -> None:
    tallies = EventTallies()
    tallies.add([Event(A, 0.0, xid=31), Event(A, 10.0, xid=43)])
    tallies.add([Event(A, RECENT_SECONDS + 5.0, xid=94)])
    tally = tallies.tally(A)
    assert tally.recent == ((10.0, 43), (RECENT_SECONDS + 5.0, 94))
    assert tally.xid == {31: 1, 43: 1, 94: 1}  # the counters keep everything


def test_recent_xids_are_bounded() -> None:
    tallies = EventTallies()
    tallies.add(Event(A, i / 1000, xid=13) for i in range(1500))  # an Xid storm
    tally = tallies.tally(A)
    assert len(tally.recent) == 1000 and tally.recent[0] == (0.5, 13)
    assert tally.xid == {13: 1500}


@given(st.lists(st.tuples(st.sampled_from([A, B]), st.sampled_from([13, 31, 79, None]), st.booleans()), max_size=60))
def test_counts_only_grow_and_match_the_events(events: list[tuple[str, int | None, bool]]) -> None:
    tallies = EventTallies()
    seen: list[Event] = []
    for at, (uuid, xid, ecc) in enumerate(events):
        event = Event(uuid, float(at), xid=xid, ecc="single_bit" if ecc else None)
        before = {u: tallies.tally(u) for u in (A, B)}
        tallies.add([event])
        seen.append(event)
        for u in (A, B):
            after = tallies.tally(u)
            assert all(after.xid.get(code, 0) >= n for code, n in before[u].xid.items())
            assert all(after.ecc.get(kind, 0) >= n for kind, n in before[u].ecc.items())
            if u != uuid:
                assert after == before[u]  # another GPU's event changes nothing here
    for u in (A, B):
        mine = [e for e in seen if e.uuid == u]
        tally = tallies.tally(u)
        assert sum(tally.xid.values()) == sum(e.xid is not None for e in mine)
        assert sum(tally.ecc.values()) == sum(e.ecc is not None for e in mine)
