"""The system-tier tests of tests/unit/test_dra_sources.py (split by what they start)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.attribution.kubeapi import ApiClient, NodePods, ResourceSlices
from tests.kubeapi_server import NODE, KubeApi, api_pod
from tests.unit.test_dra_sources import DRIVERS, _client, wait_for
from tests.webtls import Certs, make_certs


@pytest.fixture
def api(certs: Certs) -> Iterator[KubeApi]:
    server = KubeApi(certs)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_pods_of_this_node_are_listed_page_by_page(api: KubeApi, tmp_path: Path) -> None:
    api.pods = [api_pod("ns", f"p{n}", f"uid-{n}", {f"{n:064x}": "c"}) for n in range(1203)]
    api.pods.append(api_pod("ns", "elsewhere", "uid-x", {}, node="gpu-node-2"))
    source = NodePods(_client(api, tmp_path), NODE, 30.0, 60.0)
    source.refresh()
    state = source.current()
    assert (state.up, len(state.pods), state.pods["uid-1202"].containers) == (True, 1203, {f"{1202:064x}": "c"})
    assert [query.count("continue=") for query, _ in api.requests] == [0, 1, 1]  # three pages of 500


def test_no_dra_api_wrong_ca_and_no_token_are_told_apart(api: KubeApi, tmp_path: Path, certs: Certs) -> None:
    api.versions = ()  # a cluster without resource.k8s.io
    slices = ResourceSlices(_client(api, tmp_path), NODE, DRIVERS, 30.0, 60.0)
    slices.refresh()
    assert (slices.current().error, slices.current().calls) == ("not_found", 1)
    assert [path for path in api.paths()] == [
        f"/apis/resource.k8s.io/{v}/resourceslices" for v in ("v1", "v1beta2", "v1beta1")
    ]
    other = make_certs(tmp_path / "other")
    wrong = ResourceSlices(_client(api, tmp_path, str(other.path("ca.crt"))), NODE, DRIVERS, 30.0, 60.0)
    wrong.refresh()
    assert wrong.current().error == "tls"
    missing = ApiClient(api.url, str(tmp_path / "absent"), str(certs.path("ca.crt")), 2.0)
    nothing = NodePods(missing, NODE, 30.0, 60.0)
    nothing.refresh()
    assert (nothing.current().error, nothing.current().up) == ("token", False)
    assert all(header != "Bearer " for _query, header in api.requests)


def test_pods_are_watched_after_the_list(api: KubeApi, tmp_path: Path) -> None:
    api.pods = [api_pod("ns", "first", "uid-1", {})]
    source = NodePods(_client(api, tmp_path), NODE, 30.0, 60.0)
    source.start()
    try:
        wait_for(lambda: api.watches() == 1)
        assert "uid-1" in source.current().pods
        api.publish("ADDED", api_pod("ns", "second", "uid-2", {"c" * 64: "main"}), plural="pods")
        wait_for(lambda: "uid-2" in source.current().pods, timeout=2.0)
        api.publish("DELETED", api_pod("ns", "first", "uid-1", {}), plural="pods")
        wait_for(lambda: "uid-1" not in source.current().pods, timeout=2.0)
        assert sum("watch=" not in query for query, _ in api.requests) == 1  # one list, the rest watched
        watch = next(query for query, _ in api.requests if "watch=" in query)
        assert "allowWatchBookmarks=true" in watch and "resourceVersion=100" in watch and "timeoutSeconds=30" in watch
    finally:
        began = time.monotonic()
        source.stop()
    assert time.monotonic() - began < 1.0  # stop ends the watch in progress (else it waits up to 6 s)
