"""The documentation's generated sections, from the option table, the catalogue and the dcgm-exporter
tables: the flag table (docs/configuration.md), the metric table (docs/metrics.md) and dcgm-exporter's
fields and flags (docs/dcgm-exporter-compatibility.md), each between ``<!-- generated:NAME -->`` and
``<!-- end:NAME -->``. ``python -m tests.readme`` rewrites them in place; a test fails when they drift.
"""

from __future__ import annotations

import sys

from gpu_exporter.catalogue import (
    COLLECTORS,
    DEFAULT_OFF,
    EVENT_METRICS,
    FAMILIES,
    FULL,
    HEALTH_METRICS,
    IDENTITY_METRICS,
    MIG_LABELS,
    SELF_METRICS,
    STATIC,
    SWITCH_FIXED_METRICS,
    SWITCH_METRICS,
    FixedMetric,
    MetricSpec,
)
from gpu_exporter.config import CONFIG_FILE_ENV, CONFIG_FILE_FLAG, OPTIONS, collector_env
from tests.harness import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"


def flag_table() -> str:
    rows = ["| Flag | Environment | Meaning |", "|---|---|---|"]
    rows.append(f"| `{CONFIG_FILE_FLAG} FILE` | `{CONFIG_FILE_ENV}` | YAML file with the same settings (see below). |")
    rows += [
        f"| {' / '.join(f'`{flag}`' for flag in (*o.aliases, o.flag))} `{o.metavar}` | "
        f"{', '.join(f'`{env}`' for env in o.envs)} | {o.help} |"
        for o in OPTIONS
    ]
    rows += [
        f"| `--collector.{name}` / `--no-collector.{name}` | `{collector_env(name)}=true\\|false` | "
        f"Enable or disable the {name} collector (default {'off' if name in DEFAULT_OFF else 'on'}). |"
        for name in COLLECTORS
    ]
    rows.append("| `--version` | | Print the version and exit. |")
    return "\n".join(rows)


def _fixed_row(metric: FixedMetric, collector: str = "—") -> str:
    labels = ", ".join(f"`{label}`" for label in metric.labels) or "—"
    return f"| `{metric.name}` | {metric.kind} | {metric.unit or '—'} | {labels} | {collector} | {metric.help} |"


#: The labels an entity kind adds after the GPU's (or MIG instance's) own.
_ENTITY_LABELS = {
    "process": ", `pid`, `process`, `user` (+ `pod_uid`, `slurm_job` where the process's cgroups say, "
    "`namespace`, `pod`, `container` where the kubelet or the API server names the pod; on a MIG instance, "
    "its labels too)",
    "allocation": " (MIG: + the instance's labels), then per allocation `namespace`, `pod`, `container` "
    "(Kubernetes; + `claim`, `claim_namespace` for a DRA ResourceClaim), `slurm_job` or `hpc_job`",
}


def _spec_row(family: tuple[MetricSpec, ...]) -> str:
    """One family of catalogue rows: labels (variant values listed), collector, help and cadence."""
    spec = family[0]
    variant = "".join(
        f", `{label}` ({' · '.join(dict.fromkeys(dict(row.variant)[label] for row in family))})"
        for label, _ in spec.variant
    )
    labels = (
        ("`nvswitch`" if spec.nvswitch else "`gpu`, `uuid`")
        + (", `nvlink`" if spec.per_link else "")
        + variant
        + (f" (+ {', '.join(f'`{label}`' for label in MIG_LABELS)} per MIG device)" if spec.mig else "")
        + (_ENTITY_LABELS["process"] if "process" in spec.entities else "")
        + (_ENTITY_LABELS["allocation"] if "pod" in spec.entities else "")
    )
    reason = "a near-static value" if spec.every == STATIC else "an expensive call"
    cadence = f" Read every {spec.every} s ({reason})." if spec.every > 1 else ""
    return (
        f"| `{spec.name}` | {spec.kind} | {spec.unit or '—'} | {labels} | {spec.collector} | {spec.help}{cadence}"
        f"{_detail(family)} |"
    )


def _detail(family: tuple[MetricSpec, ...]) -> str:
    """Which of a family's series only ``--metrics.detail=full`` renders."""
    full = [row for row in family if row.detail == FULL]
    if not full:
        return ""
    if len(full) == len(family):
        return " **Full detail only** (`--metrics.detail=full`)."
    values = " · ".join(", ".join(f"{label}={value}" for label, value in row.variant) for row in full)
    return f" Full detail only (`--metrics.detail=full`): {values}."


def metric_table() -> str:
    rows = ["| Metric | Type | Unit | Labels | Collector | Meaning and source |", "|---|---|---|---|---|---|"]
    rows += [_fixed_row(metric) for metric in IDENTITY_METRICS]
    rows += [_spec_row(family) for family in FAMILIES.values()]
    rows += [_fixed_row(metric, "xid") for metric in EVENT_METRICS]
    rows += [_fixed_row(metric) for metric in HEALTH_METRICS]
    rows += [_fixed_row(metric, "nvswitch") for metric in SWITCH_FIXED_METRICS[:1]]
    switch_families = {spec.name: tuple(s for s in SWITCH_METRICS if s.name == spec.name) for spec in SWITCH_METRICS}
    rows += [_spec_row(family) for family in switch_families.values()]
    rows += [_fixed_row(metric, "nvswitch") for metric in SWITCH_FIXED_METRICS[1:]]
    rows += [_fixed_row(metric) for metric in SELF_METRICS]
    return "\n".join(rows)


def dcgm_exporter_flag_table() -> str:
    """dcgm-exporter's flags and variables, each with what it does here."""
    from gpu_exporter.compat.flags import ALIASES, FLAGS

    rows = ["| dcgm-exporter flag | Variable | Here |", "|---|---|---|"]
    rows += [
        f"| {' / '.join(f'`{name}`' for name in spelling.split(' / '))} | `{env}` | Same as `{ours}`. |"
        for spelling, env, ours in ALIASES
    ]
    rows += [
        f"| {' / '.join(f'`{name}`' for name in reversed(flag.names))} | `{flag.env}` | {flag.does} |" for flag in FLAGS
    ]
    rows.append("| | `NODE_NAME` | Value of the `Hostname` label (else the host name). |")
    return "\n".join(rows)


def dcgm_exporter_field_list() -> str:
    """Every DCGM field served in dcgm-exporter mode (from the catalogue and the composed fields), then
    the rest of DCGM's device fields by id range with why they are not."""
    from gpu_exporter.catalogue import BY_KEY, METRICS
    from gpu_exporter.compat.field_names import BASE_UNIT_NAMES, FIELD_IDS
    from gpu_exporter.compat.fields import (
        BANDWIDTH_FIELDS,
        BANDWIDTH_SOURCE,
        BYTES_PER_SECOND_FIELDS,
        COMPOSED,
        DOUBLE_IDS,
        ENCODED_FIELDS,
        HOST_SOURCES,
        IDENTITY_SOURCES,
        LINK_BANDWIDTH,
        LINK_BANDWIDTHS,
        LINK_ENTITY_FIELDS,
        NOT_SERVED,
    )
    from gpu_exporter.compat.plan import LABEL_FIELDS

    served: dict[int, tuple[str, str, str]] = {}
    for spec in METRICS:
        if spec.compat_name:
            backends = "/".join(name.upper() for name in ("nvml", "dcgm") if spec.source(name) is not None)
            served[FIELD_IDS[spec.compat_name]] = (spec.compat_name, f"`{spec.key}`", backends)
    names = {number: name for name, number in reversed(FIELD_IDS.items())}
    names.update({number: name for name, number in BASE_UNIT_NAMES.items()})
    for number, composed in COMPOSED.items():  # the backends that read every part
        parts = [BY_KEY[key] for key in composed.keys]
        backends = "/".join(name.upper() for name in ("nvml", "dcgm") if all(p.source(name) for p in parts))
        served.setdefault(number, (names[number], composed.describe, backends))
    each_link = "of each NVLink that is up (a link entity)"
    for number, key in LINK_ENTITY_FIELDS.items():
        backends = "/".join(name.upper() for name in ("nvml", "dcgm") if BY_KEY[key].source(name) is not None)
        served.setdefault(number, (names[number], f"`{key}` {each_link}", backends))
    served.setdefault(LINK_BANDWIDTH, (names[LINK_BANDWIDTH], f"{BANDWIDTH_SOURCE}, {each_link}", "NVML"))
    for number, direction in LINK_BANDWIDTHS.items():  # 1530, 1531: one direction's counter alone
        alone = f"as 1529 from `gpu_nvlink_{'transmit' if direction == 'tx' else 'receive'}_bytes_total` alone"
        served.setdefault(number, (names[number], f"{alone}, {each_link}", "NVML"))
    for number, key in ENCODED_FIELDS.items():  # NVML's encoded value behind the decoded row
        served.setdefault(number, (names[number], f"NVML's encoded value behind `{key}`", "NVML"))
    for number, link in BANDWIDTH_FIELDS.items():
        over = "every link" if link is None else f"link {link}"
        served.setdefault(number, (names[number], f"{BANDWIDTH_SOURCE}, {over}", "NVML"))
    for number, link in BYTES_PER_SECOND_FIELDS.items():  # DCGM 4.7: the same KiB/s rate × 1024
        over = "every link" if link is None else f"link {link}"
        bytes_source = BANDWIDTH_SOURCE.replace("÷ 1000", "× 1024")
        served.setdefault(number, (names[number], f"{bytes_source}, {over}", "NVML"))
    for number, source in HOST_SOURCES.items():
        served.setdefault(number, (names[number], source, "NVML/DCGM"))
    for number, source in IDENTITY_SOURCES.items():
        served.setdefault(number, (names[number], f"{source}, read at discovery", "NVML/DCGM"))
    served.setdefault(
        254, (names[254], "`gpu_memory_used_bytes` ÷ (total − reserved), as DCGM computes it", "NVML/DCGM")
    )
    served.setdefault(
        254, (names[254], "`gpu_memory_used_bytes` ÷ (total − reserved), as DCGM computes it", "NVML/DCGM")
    )
    labels = ", ".join(f"`{names[number]}`" for number in sorted(LABEL_FIELDS))
    rows = ["| Field | Id | From | Backends | DCGM type |", "|---|---|---|---|---|"]
    rows += [
        f"| `{name}` | {number} | {source} | {backends} | {'double' if number in DOUBLE_IDS else 'int64'} |"
        for number, (name, source, backends) in sorted(served.items())
    ]
    rows += [
        "",
        f"Label fields (type `label`; integers in decimal): {labels}. `DCGM_EXP_P2P_STATUS`: one series per "
        "ordered pair of GPUs with `link_status` and `peer_gpu`, valued by the P2P status over NVLink (NVML "
        "nvmlDeviceGetP2PStatus, DCGM dcgmGetNvLinkP2PStatus), read at discovery.",
        "",
        "Not served (other DCGM device fields, by id):",
        "",
    ]
    rows += [f"- {low}{'' if low == high else f'-{high}'}: {why}." for low, high, why in NOT_SERVED]
    return "\n".join(rows)


SECTIONS = {
    "flags": flag_table,
    "metrics": metric_table,
    "dcgm-exporter-flags": dcgm_exporter_flag_table,
    "dcgm-exporter-fields": dcgm_exporter_field_list,
}

#: Each generated file and the sections it holds, in the order they appear in it.
GENERATED = {
    DOCS / "configuration.md": ("flags",),
    DOCS / "metrics.md": ("metrics",),
    DOCS / "dcgm-exporter-compatibility.md": ("dcgm-exporter-fields", "dcgm-exporter-flags"),
}


def render(text: str, names: tuple[str, ...], where: str = "the file") -> str:
    """``text`` with each generated section of ``names`` replaced by its current content."""
    for name in names:
        start, end = f"<!-- generated:{name} -->", f"<!-- end:{name} -->"
        before, found, rest = text.partition(start)
        if not found:
            raise SystemExit(f"{where} lacks the marker {start}")
        _, found_end, after = rest.partition(end)
        if not found_end:
            raise SystemExit(f"{where} lacks the marker {end}")
        text = f"{before}{start}\n{SECTIONS[name]()}\n{end}{after}"
    return text


if __name__ == "__main__":
    for path, names in GENERATED.items():
        where = str(path.relative_to(REPO))
        path.write_text(render(path.read_text(), names, where))
        sys.stdout.write(f"{where}: {', '.join(names)} regenerated\n")
