"""The plan in process: which rows each read asks for. A row is due in cycle ``c`` when
``c % every == 0`` (every row in a root's first read); derived rows and rows the backend has no
source for are never asked; a value stays current for ``STALE_INTERVALS`` intervals, a slow row's
for ``every + 2``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter.catalogue import ALL_METRICS, DEFAULT_COLLECTORS, Integral, enabled_specs
from gpu_exporter.catalogue.spec import DcgmSource, MetricSpec, NvmlSource, gauge
from gpu_exporter.sampling.plan import STALE_INTERVALS, Plan


def _row(name: str, every: int = 1, nvml: bool = True, dcgm: bool = True, **kwargs: object) -> MetricSpec:
    return gauge(name, "celsius", "test row", "test", NvmlSource("nvmlX") if nvml else None,
                 DcgmSource(1) if dcgm else None, every=every, **kwargs)  # fmt: skip


SPECS = (
    _row("t_fast"),
    _row("t_two", every=2),
    _row("t_three", every=3),
    _row("t_sixty", every=60),
    _row("t_nvml_only", dcgm=False),
    _row("t_dcgm_only_slow", nvml=False, every=5),
    _row("t_derived", nvml=False, dcgm=False, derive=Integral("t_fast")),
    _row("t_switch", nvml=False, every=2, entities=("nvswitch",)),
)


def _names(specs: tuple[MetricSpec, ...]) -> list[str]:
    return [spec.name for spec in specs]


def test_readable_rows_leave_out_derived_and_sourceless_ones() -> None:
    assert _names(Plan(SPECS, "nvml").readable) == ["t_fast", "t_two", "t_three", "t_sixty", "t_nvml_only"]
    dcgm = Plan(SPECS, "dcgm")
    assert _names(dcgm.readable) == ["t_fast", "t_two", "t_three", "t_sixty", "t_dcgm_only_slow", "t_switch"]
    assert dcgm.slow == {"t_two": 2, "t_three": 3, "t_sixty": 60, "t_dcgm_only_slow": 5, "t_switch": 2}


def test_rows_are_due_by_their_cadence() -> None:
    plan = Plan(SPECS, "nvml")
    never = lambda uid, key: False  # noqa: E731  (handed through to the backend unchanged)
    due = {cycle: _names(plan.request("gpu", cycle, never).specs) for cycle in (0, 1, 2, 3, 6, 60, 61)}
    assert due == {
        0: ["t_fast", "t_two", "t_three", "t_sixty", "t_nvml_only"],
        1: ["t_fast", "t_nvml_only"],
        2: ["t_fast", "t_two", "t_nvml_only"],
        3: ["t_fast", "t_three", "t_nvml_only"],
        6: ["t_fast", "t_two", "t_three", "t_nvml_only"],
        60: ["t_fast", "t_two", "t_three", "t_sixty", "t_nvml_only"],
        61: ["t_fast", "t_nvml_only"],
    }
    request = plan.request("gpu", 7, never)
    assert request.cycle == 7 and request.asks is never


def test_a_first_read_asks_for_every_row_whatever_the_cycle() -> None:
    plan = Plan(SPECS, "nvml")
    assert _names(plan.request("gpu", 7, lambda uid, key: True, everything=True).specs) == _names(plan.readable)
    assert plan.slow_due(7, everything=True) == ("t_two", "t_three", "t_sixty")
    assert _names(plan.request("gpu", 7, lambda uid, key: True).specs) == ["t_fast", "t_nvml_only"]  # not remembered


def test_roots_are_planned_apart() -> None:
    nvml, dcgm = Plan(SPECS, "nvml"), Plan(SPECS, "dcgm")
    assert nvml.wants("gpu") and not nvml.wants("fabric") and dcgm.wants("fabric")
    assert _names(dcgm.request("fabric", 0, lambda uid, key: True).specs) == ["t_switch"]
    assert _names(dcgm.request("fabric", 1, lambda uid, key: True).specs) == []
    assert "t_switch" not in _names(dcgm.request("gpu", 0, lambda uid, key: True).specs)


@given(st.integers(min_value=0, max_value=10**6), st.booleans(), st.sampled_from(["nvml", "dcgm"]))
def test_due_rows_are_exactly_those_whose_every_divides_the_cycle(cycle: int, first: bool, backend: str) -> None:
    plan = Plan(SPECS, backend)
    for root in ("gpu", "fabric"):
        expected = [s.name for s in plan.readable if s.root == root and (first or cycle % s.every == 0)]
        assert _names(plan.request(root, cycle, lambda uid, key: True, first).specs) == expected
    slow = tuple(s.key for s in plan.readable if s.every > 1 and (first or cycle % s.every == 0))
    assert plan.slow_due(cycle, first) == slow
    assert all(plan.due(s.key, cycle) == (cycle % s.every == 0) for s in plan.readable)


@given(st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=30))
def test_the_catalogue_plan_is_the_same_whatever_order_cycles_are_asked_in(cycles: list[int]) -> None:
    """Due rows are cached by which cadences are due: a cache filled by other cycles changes nothing."""
    specs = enabled_specs(DEFAULT_COLLECTORS)
    plan = Plan(specs, "nvml")
    for cycle in cycles:
        fresh = Plan(specs, "nvml").request("gpu", cycle, lambda uid, key: True).specs
        assert plan.request("gpu", cycle, lambda uid, key: True).specs == fresh


def test_a_value_stays_current_for_stale_intervals_or_every_plus_two() -> None:
    plan = Plan(SPECS, "nvml")
    assert plan.current_for("t_fast") == STALE_INTERVALS == 3
    assert plan.current_for("t_three") == 5 and plan.current_for("t_sixty") == 62
    assert plan.current_for("not_a_row") == STALE_INTERVALS


def test_the_catalogues_slow_rows_are_its_every_above_one() -> None:
    plan = Plan(ALL_METRICS, "dcgm")
    assert plan.slow == {s.key: s.every for s in ALL_METRICS if s.every > 1 and s.source("dcgm") is not None}
    assert plan.slow["gpu_power_management_limit_watts"] == 60
    assert "gpu_power_watts" not in plan.slow


def test_cadence_is_in_seconds_whatever_the_interval() -> None:
    """A row's ``every`` is seconds: at a 5 s interval a 60 s row is read every 12th cycle and a 5 s
    row every cycle; at 100 ms a 5 s row every 50th; a value stays current for its cycles + 2."""
    slow = Plan(SPECS, "nvml", 5.0)
    assert slow.slow == {"t_sixty": 12}
    assert slow.current_for("t_sixty") == 14
    assert [s.name for s in slow.request("gpu", 1, lambda uid, key: True).specs if s.name == "t_sixty"] == []
    assert "t_three" in [s.name for s in slow.request("gpu", 1, lambda uid, key: True).specs]
    fast = Plan(SPECS, "nvml", 0.1)
    assert fast.slow == {"t_two": 20, "t_three": 30, "t_sixty": 600}
