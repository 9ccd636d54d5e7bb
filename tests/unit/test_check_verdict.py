"""``gpu-exporter check``'s verdict from a status document, in process: Node Problem Detector's plugin
protocol (exit 0 ok, 1 problem, 2 unknown; one line of at most 80 characters naming the GPU, the
problem and the action)."""

from __future__ import annotations

from typing import Any

from gpu_exporter.commands.check import MAX_LINE, OK, PROBLEM, UNKNOWN, verdict


def _status(health: dict[str, Any] | None, backend_up: bool = True) -> dict[str, Any]:
    return {"backend": "nvml", "backend_up": backend_up, "backend_reason": "libnvidia-ml.so.1 not found",
            "health": health}  # fmt: skip


def _health(status: str, action: str = "none", problems: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"status": status, "action": action, "present_gpus": 8, "problems": list(problems)}


def test_healthy_gpus_are_ok() -> None:
    assert verdict(_status(_health("pass"))) == (OK, "OK: 8 GPUs healthy")


def test_a_gpu_needing_action_is_a_problem_named_with_its_action() -> None:
    problems = ("GPU 1: the driver asks for recovery action 1: reset_gpu", "1 of 9 GPUs missing: reboot")
    code, line = verdict(_status(_health("fail", "reboot", problems)))
    assert (code, line) == (PROBLEM, "GPU 1: the driver asks for recovery action 1: reset_gpu (+1 more)")


def test_a_long_reason_is_cut_to_the_line_npd_keeps() -> None:
    problems = ("GPU 3: Xid 48 (double-bit (uncorrectable) ECC error: " + "x" * 100 + "): reset_gpu", "other")
    code, line = verdict(_status(_health("fail", "reset_gpu", problems)))
    assert code == PROBLEM and len(line) == MAX_LINE and line.endswith("… (+1 more)") and "\n" not in line


def test_a_warning_with_nothing_to_do_is_ok_and_says_so() -> None:
    code, line = verdict(_status(_health("warn", "none", ("GPU 2: hardware thermal slowdown: none",))))
    assert code == OK and line == "OK: 8 GPUs, warning: GPU 2: hardware thermal slowdown: none"


def test_unknown_while_the_backend_is_down_or_nothing_was_judged() -> None:
    code, line = verdict(_status(_health("pass"), backend_up=False))
    assert code == UNKNOWN and line.startswith("UNKNOWN: backend nvml down") and len(line) <= MAX_LINE
    assert verdict(_status(_health("unknown")))[0] == UNKNOWN
    assert verdict(_status(None))[0] == UNKNOWN


def test_a_bad_flag_value_is_one_line_and_exit_2(capsys: Any) -> None:
    import pytest

    from gpu_exporter.commands.check import main

    for argv, needle in ((["--url", "ftp://node:9400"], "not an http:// or https:// URL"),
                         (["--timeout", "0"], "not from 0 to 300 seconds")):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and needle in err and err.count("\n") == 1, err
