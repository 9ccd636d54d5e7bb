"""Generate the Grafana dashboards in this folder from code, with grafana-foundation-sdk (pinned in
pyproject's ``test`` extra; its types and builders are those of Grafana 11.6, schema version 41).

    python dashboards/generate.py [write]        rewrite dashboards/*.json from the definitions below
    python dashboards/generate.py check          exit 1 when a committed JSON file differs (a test runs this)

The panel content lives in ``content.py`` beside this file; this file turns it into Grafana JSON. The
Kubernetes ConfigMaps for Grafana's dashboard sidecar are made from the JSON files by
``deploy/kubernetes/generate.py``; run it after this one.
Conventions every panel follows (tests/unit/test_dashboards.py checks them): the Prometheus data source is
the ``datasource`` variable, never a uid; every selector filters by ``$job``, ``$instance`` (and
``$gpu`` where the series is about a GPU); every rate uses ``$__rate_interval``; every panel has a
description and a unit; limits the exporter exports are drawn as dashed series, not typed-in numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, stat, statetimeline, table, text, timeseries
from grafana_foundation_sdk.builders.common import LineStyle, ReduceDataOptions, StackingConfig, VizLegendOptions
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.heatmap import HeatmapColorMode
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.text import TextMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from content import DASHBOARDS, DashboardSpec, PanelSpec, Query, RowSpec  # the folder is not a package

HERE = Path(__file__).resolve().parent
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
#: Legend suffix that marks a limit series (drawn dashed, no fill) in time series panels.
LIMIT_SUFFIX = " (limit)"
LIMIT_REGEX = r".* \(limit\)$"
WIDTH = 24

PanelBuilder = (
    timeseries.Panel | stat.Panel | table.Panel | heatmap.Panel | statetimeline.Panel | text.Panel
)  # fmt: skip


def _target(query: Query, ref: str, *, instant: bool, table_format: bool) -> Dataquery:
    target = Dataquery().expr(query.expr).ref_id(ref).datasource(DATASOURCE)
    if query.legend:
        target = target.legend_format(query.legend)
    target = target.instant() if instant else target.range()
    if table_format:
        target = target.format(PromQueryFormat.TABLE)
    return target


def _mappings(spec: PanelSpec) -> list[model.ValueMapping]:
    if not spec.states:
        return []
    return [
        model.ValueMap(
            options={
                value: model.ValueMappingResult(text=label, color=color, index=index)
                for index, (value, label, color) in enumerate(spec.states)
            }
        )
    ]


def _thresholds(spec: PanelSpec) -> db.ThresholdsConfig:
    steps = [model.Threshold(value=None, color="green")]
    steps += [model.Threshold(value=value, color=color) for value, color in spec.thresholds]
    return db.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)


def _panel(spec: PanelSpec) -> PanelBuilder:
    """One SDK panel builder for ``spec`` (grid position and id are set by the caller)."""
    if spec.kind == "text":
        return text.Panel().title(spec.title).description(spec.description).mode(TextMode.MARKDOWN).content(spec.text)
    instant = spec.kind in ("stat", "table")
    refs = "ABCDEFGHIJ"
    targets = [
        _target(query, refs[i], instant=instant, table_format=spec.kind == "table")
        for i, query in enumerate(spec.queries)
    ]
    panel: PanelBuilder
    if spec.kind == "timeseries":
        ts = timeseries.Panel().legend(
            VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
        if spec.bars:
            ts = ts.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80)
        if spec.stack:
            ts = ts.stacking(StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(30)
        if any(query.legend.endswith(LIMIT_SUFFIX) for query in spec.queries):
            ts = ts.override_by_regexp(
                LIMIT_REGEX,
                [
                    model.DynamicConfigValue("custom.lineStyle", LineStyle().fill("dash")
                                             .dash([10, 10]).build().to_json()),
                    model.DynamicConfigValue("custom.fillOpacity", 0),
                ],
            )  # fmt: skip
        panel = ts
    elif spec.kind == "stat":
        panel = (
            stat.Panel()
            .graph_mode(common.BigValueGraphMode.NONE)
            .color_mode(common.BigValueColorMode.VALUE)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        )
    elif spec.kind == "table":
        panel = table.Panel()
        if len(targets) > 1:
            panel = panel.with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        panel = panel.with_transformation(
            model.DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True, "__name__": True}})
        )
    elif spec.kind == "heatmap":
        panel = (
            heatmap.Panel()
            .calculate(False)
            .color(
                heatmap.HeatmapColorOptions()
                .mode(HeatmapColorMode.SCHEME)
                .scheme("Oranges")
                .fill("dark-orange")
                .exponent(0.5)
                .steps(64)
                .min(0)
                .max(1)
            )
            .filter_values(heatmap.FilterValueRange())  # keep 0 cells: an idle GPU is information
            .cell_values(heatmap.CellValues().unit(spec.unit))
            .y_axis(heatmap.YAxisConfig().unit("none"))
            .show_value(common.VisibilityMode.NEVER)
        )
    elif spec.kind == "timeline":
        panel = statetimeline.Panel().show_value(common.VisibilityMode.NEVER).merge_values(True)
    else:
        raise ValueError(f"unknown panel kind {spec.kind!r} in {spec.title!r}")
    panel = panel.title(spec.title).description(spec.description).datasource(DATASOURCE).unit(spec.unit)
    for target in targets:
        panel = panel.with_target(target)
    if spec.min is not None:
        panel = panel.min(spec.min)
    if spec.max is not None:
        panel = panel.max(spec.max)
    if spec.states:
        panel = panel.mappings(_mappings(spec))
    if spec.thresholds or spec.kind in ("stat", "timeline"):
        panel = panel.thresholds(_thresholds(spec))
    return panel


def _variables(spec: DashboardSpec) -> list[db.DatasourceVariable | db.QueryVariable]:
    def query(name: str, label: str, expr: str, all_value: str | None = ".*") -> db.QueryVariable:
        variable = (
            db.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(expr)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.NATURAL_ASC)
            .multi(True)
            .include_all(True)
            .current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
        )
        return variable.all_value(all_value) if all_value is not None else variable

    return [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        # All jobs means every job with a gpu-exporter in it (so that up{job=~"$job"} is only theirs); within
        # them, All nodes and GPUs is ".*", which keeps the queries short on a large fleet.
        query("job", "Job", "label_values(gpu_exporter_build_info, job)", all_value=None),
        query("instance", "Node", 'label_values(gpu_exporter_build_info{job=~"$job"}, instance)'),
        query("gpu", "GPU", 'label_values(gpu_info{job=~"$job", instance=~"$instance"}, gpu)'),
    ]


def build(spec: DashboardSpec) -> dict[str, object]:
    """The dashboard as Grafana JSON (a dict), panels laid out row by row, ids numbered from 1."""
    dashboard = (
        db.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(["gpu", "gpu-exporter"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .link(
            db.DashboardLink("GPU dashboards")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(["gpu-exporter"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for variable in _variables(spec):
        dashboard = dashboard.with_variable(variable)
    next_id, y = 1, 0
    for row in spec.rows:
        dashboard = dashboard.with_row(
            db.Row(row.title).id(next_id).grid_pos(model.GridPos(h=1, w=WIDTH, x=0, y=y)).collapsed(False)
        )
        next_id, y = next_id + 1, y + 1
        x, line_height = 0, 0
        for panel_spec in row.panels:
            if x + panel_spec.width > WIDTH:
                x, y, line_height = 0, y + line_height, 0
            panel = (
                _panel(panel_spec)
                .id(next_id)
                .grid_pos(model.GridPos(h=panel_spec.height, w=panel_spec.width, x=x, y=y))
            )
            dashboard = dashboard.with_panel(panel)
            next_id, x, line_height = next_id + 1, x + panel_spec.width, max(line_height, panel_spec.height)
        y += line_height
    encoded: dict[str, object] = json.loads(JSONEncoder(sort_keys=True).encode(dashboard.build()))
    return encoded


def render(spec: DashboardSpec) -> str:
    """The JSON file's text: sorted keys, two-space indent, a final newline."""
    return json.dumps(build(spec), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def outputs() -> dict[Path, str]:
    return {HERE / f"{spec.file}.json": render(spec) for spec in DASHBOARDS}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dashboards/generate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="write", choices=("write", "check"))
    args = parser.parse_args(argv)
    stale = [path for path, content in outputs().items() if not path.exists() or path.read_text() != content]
    if args.command == "check":
        for path in stale:
            print(f"{path.name} is stale: run python dashboards/generate.py", file=sys.stderr)
        return 1 if stale else 0
    for path, content in outputs().items():
        path.write_text(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["DASHBOARDS", "DashboardSpec", "PanelSpec", "Query", "RowSpec", "build", "render"]
