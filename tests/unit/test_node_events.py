"""One Kubernetes Event per transition of the node condition (``--kubernetes.node-condition-events``,
issue 38 item 5), in process against the API-server stand-in (tests/kubeapi_server.py, TLS and a bearer
token) on a fake clock: the first set and each change to True or False make exactly one core/v1 Event
involving the Node (as the kubelet's node events: namespace default, the node's name as uid), Warning
with the condition's reason and a message naming the GPU and action, or Normal; heartbeats and Unknown
make none; a refused creation is counted, retried with backoff and never holds the condition back; a
retry after a lost answer is refused as AlreadyExists instead of making a second Event."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter import model
from gpu_exporter.attribution.nodecondition import BACKOFF_SECONDS, NodeCondition
from gpu_exporter.backends.base import DeviceIdentity
from gpu_exporter.catalogue import keys
from gpu_exporter.sampling.health import Health, HealthModel
from gpu_exporter.sampling.snapshot import DeviceView
from tests.kubeapi_server import NODE, KubeApi, api_node
from tests.webtls import make_certs

TYPE = "GPUHealthy"
HEARTBEAT = 60.0


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now


class _Health:
    """The health the condition reads: healthy, a GPU asking for a reset, or not judged."""

    def __init__(self) -> None:
        self.recovery: float | None = 0.0  # None: not judged (backend down)

    def __call__(self) -> Health:
        if self.recovery is None:
            return Health()
        view = DeviceView(
            DeviceIdentity(0, "GPU-0"), True, {model.gpu(0, "GPU-0"): {keys.RECOVERY_ACTION: self.recovery}}
        )
        return HealthModel().assess([view], None, 1.0)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    server = KubeApi(make_certs(tmp_path_factory.mktemp("certs")))
    server.start()
    yield server
    server.stop()


def _condition(api: KubeApi, tmp_path: Path, health: _Health, clock: _Clock) -> NodeCondition:
    api.nodes, api.events, api.patches = {NODE: api_node()}, [], []
    api.refuse_events = api.lose_event_answers = 0
    token = tmp_path / "token"
    token.write_text(api.token + "\n")
    return NodeCondition(api.url, str(token), str(api.certs.path("ca.crt")), NODE, TYPE, health,
                         heartbeat_seconds=HEARTBEAT, events=True, clock=clock, wall=clock.wall)  # fmt: skip


def test_one_event_per_transition_none_on_heartbeats_or_unknown(api: KubeApi, tmp_path: Path) -> None:
    health, clock = _Health(), _Clock()
    condition = _condition(api, tmp_path, health, clock)
    condition.step()  # first set: True
    assert api.condition(NODE, TYPE)["status"] == "True" and len(api.events) == 1
    first = api.events[0]
    assert first["metadata"]["namespace"] == "default"
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE}
    assert (first["type"], first["reason"], first["message"]) == (
        "Normal",
        "GPUsHealthy",
        f"{TYPE} is True: 1 GPU healthy",
    )
    assert first["source"] == {"component": "gpu-exporter", "host": NODE}
    assert (first["reportingComponent"], first["count"]) == ("gpu-exporter", 1)
    assert first["firstTimestamp"] == first["lastTimestamp"] and "eventTime" not in first

    clock.now += 1
    condition.step()
    clock.now += HEARTBEAT + 1
    condition.step()  # the heartbeat: patched again, no Event
    assert len(api.patches) == 2 and len(api.events) == 1

    health.recovery = 1  # the driver asks for a GPU reset
    clock.now += 1
    condition.step()
    assert api.condition(NODE, TYPE)["status"] == "False" and len(api.events) == 2
    failed = api.events[1]
    assert (failed["type"], failed["reason"]) == ("Warning", "GPUResetNeeded")
    assert failed["message"] == f"{TYPE} is False: GPU 0: the driver asks for recovery action 1: reset_gpu"

    health.recovery = None  # the backend went down: Unknown, no Event; back to the same False: none either
    clock.now += 1
    condition.step()
    health.recovery = 1
    clock.now += 1
    condition.step()
    assert [p["status"]["conditions"][0]["status"] for p in api.patches[-2:]] == ["Unknown", "False"]
    assert len(api.events) == 2

    health.recovery = 0
    clock.now += 1
    condition.step()
    assert [e["reason"] for e in api.events] == ["GPUsHealthy", "GPUResetNeeded", "GPUsHealthy"]
    assert len({e["metadata"]["name"] for e in api.events}) == 3
    state = condition.events.current() if condition.events else None
    assert state is not None and (state.up, state.created, state.calls, state.failures) == (True, 3, 3, ())


def test_a_restart_on_a_node_that_already_has_the_status_makes_no_event(api: KubeApi, tmp_path: Path) -> None:
    health, clock = _Health(), _Clock()
    condition = _condition(api, tmp_path, health, clock)
    seeded = {"type": TYPE, "status": "True", "reason": "GPUsHealthy", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    api.nodes[NODE]["status"]["conditions"].append(seeded)
    health.recovery = None  # starting: Unknown first, then True as before the restart
    condition.step()
    health.recovery = 0
    clock.now += 1
    condition.step()
    assert api.condition(NODE, TYPE)["status"] == "True" and api.events == []


def test_refused_events_are_counted_retried_and_never_hold_the_condition_back(api: KubeApi, tmp_path: Path) -> None:
    health, clock = _Health(), _Clock()
    condition = _condition(api, tmp_path, health, clock)
    condition.step()
    api.refuse_events = 403  # no RBAC grant for events
    health.recovery = 1
    clock.now += 1
    condition.step()
    assert api.condition(NODE, TYPE)["status"] == "False"  # the condition is set all the same
    assert len(api.events) == 1
    events = condition.events
    assert events is not None
    assert (events.current().up, dict(events.current().failures)) == (False, {"unauthorized": 1})
    posts = sum(path.endswith("/events") for path in api.paths())
    clock.now += BACKOFF_SECONDS[0] / 2
    condition.step()  # within the backoff: not asked
    assert sum(path.endswith("/events") for path in api.paths()) == posts
    clock.now += BACKOFF_SECONDS[0]
    condition.step()  # retried, refused again
    assert dict(events.current().failures) == {"unauthorized": 2}

    health.recovery = 0  # a newer transition while its Event waits: the newer replaces it
    clock.now += 1
    condition.step()
    assert api.condition(NODE, TYPE)["status"] == "True" and events.current().dropped == 1
    api.refuse_events = 0
    clock.now += BACKOFF_SECONDS[-1]
    condition.step()
    assert [e["reason"] for e in api.events] == ["GPUsHealthy", "GPUsHealthy"]
    assert events.current().up and events.current().created == 2


def test_a_retry_after_a_lost_answer_makes_no_second_event(api: KubeApi, tmp_path: Path) -> None:
    health, clock = _Health(), _Clock()
    condition = _condition(api, tmp_path, health, clock)
    api.lose_event_answers = 1  # created, but the answer is a 500
    condition.step()
    events = condition.events
    assert events is not None and dict(events.current().failures) == {"http": 1}
    clock.now += BACKOFF_SECONDS[0]
    condition.step()  # the same Event again: 409 AlreadyExists, taken as created
    assert len(api.events) == 1 and events.current().up
    clock.now += BACKOFF_SECONDS[-1]
    condition.step()
    assert len(api.events) == 1
