"""The built-in scenarios shipped with the package (``scenarios/*.scn``), and how ``--simulate``
turns a name or a file into the scenario file to read."""

from __future__ import annotations

import os
from importlib import resources

from gpu_exporter.simulate.scenario import MAX_BYTES, parse

#: name → what it shows (for --help, the README and the error message).
BUILTINS: dict[str, str] = {
    "default": "8 H100-class GPUs under varied, moving load; one hot and throttled, an Xid every few minutes, "
    "one GPU shared by processes of two users",
    "mig": "an A100 split into three MIG instances, two of them running a process",
    "old-gpu": "an old driver and GPU: many calls not supported, some functions missing",
    "lost-gpu": "4 GPUs, one of which falls off the bus (Xid 79) after 30 seconds",
}
#: How the backend's reason (gpu_exporter_backend_info{reason}) starts on a simulated host; the
#: status page and ``snapshot`` show their banner when it does.
SIMULATED = "simulated: "


def builtin_path(name: str) -> str:
    """The installed file of a built-in scenario."""
    return str(resources.files("gpu_exporter.simulate") / "scenarios" / f"{name}.scn")


def procfs_of(value: str) -> str:
    """The simulated ``/proc`` shipped with a built-in (its processes' names, owners and cgroups),
    or "" where there is none (a scenario file's pids are looked up in the real ``/proc``)."""
    if value not in BUILTINS:
        return ""
    tree = resources.files("gpu_exporter.simulate") / "scenarios" / f"{value}.proc"
    return str(tree) if tree.is_dir() else ""


def passwd_of(value: str) -> str:
    """The passwd file naming the owners of a built-in's simulated processes, "" where there is none."""
    if value not in BUILTINS:
        return ""
    users = resources.files("gpu_exporter.simulate") / "scenarios" / f"{value}.passwd"
    return str(users) if users.is_file() else ""


def reason(value: str) -> str:
    """The backend reason of ``--simulate VALUE``: says plainly that no GPU is read."""
    return f"{SIMULATED}--simulate {value}; no GPU is read, every value comes from the scenario"


def resolve(value: str) -> str:
    """The scenario file for ``--simulate VALUE`` (a built-in name or a path); raises ValueError
    with what is wrong when it is neither a built-in nor a readable scenario file."""
    if value in BUILTINS:
        return builtin_path(value)
    names = ", ".join(BUILTINS)
    if os.path.isdir(value):
        raise ValueError(f"a scenario file or a built-in scenario ({names}): {value} is a directory")
    if not os.path.exists(value):
        where = "" if os.path.isabs(value) else f" (looked for {os.path.abspath(value)})"
        builtin = "" if os.sep in value or "." in value else f"there is no built-in scenario {value!r} and "
        raise ValueError(
            f"a built-in scenario ({names}) or a scenario file that exists: "
            f"{builtin}the file {value} does not exist{where}"
        )
    if not os.path.isfile(value):
        raise ValueError(f"a scenario file or a built-in scenario ({names}): {value} is not a regular file")
    try:
        with open(value, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        text = data.decode("utf-8")
    except OSError as err:
        raise ValueError(f"a readable scenario file ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError("a scenario file of key = value lines (this one is not UTF-8 text)") from None
    if len(data) > MAX_BYTES:
        raise ValueError("a scenario file of at most 1 MiB")
    skipped = parse(text).skipped
    if skipped:
        line, content = skipped[0]
        shown = content if len(content) <= 60 else content[:60] + "…"
        raise ValueError(f"a scenario file of key = value lines (line {line} has no '=': {shown!r})")
    return os.path.abspath(value)
