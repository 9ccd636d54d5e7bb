"""The unit-tier tests of tests/system/test_kubeletpods.py (split by what they start)."""

from __future__ import annotations

import json

import pytest

from gpu_exporter.attribution.kubeletpods import KubeletPods, container_id, parse
from tests.system.test_kubeletpods import ID1, ID2, ID3, ID4


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (f"containerd://{ID1}", ID1),
        (f"cri-o://{ID2}", ID2),
        (f"docker://{ID3.upper()}", ID3),
        (ID4, ID4),
        ("", ""),
        ("containerd://abc", ""),
        (f"containerd://{ID1}0", ""),
        (f"containerd:/{ID1}", ""),
    ],
)
def test_container_id(raw: str, expected: str) -> None:
    assert container_id(raw) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"items": {}}',
        b'{"items": [7]}',
        b'{"items": [{}]}',
        b'{"items": [{"metadata": {"uid": "u", "name": "p"}}]}',
        b'{"items": [{"metadata": {"uid": 1, "name": "p", "namespace": "n"}}]}',
        b'{"items": [{"metadata": {"uid": "u", "name": "p", "namespace": "n"}, "status": []}]}',
        b'{"items": [{"metadata": {"uid": "u", "name": "p", "namespace": "n"}, "status": {"containerStatuses": {}}}]}',
        b'{"items": [{"metadata": {"uid": "u", "name": "p", "namespace": "n"}, '
        b'"status": {"containerStatuses": [{"name": "c", "containerID": 5}]}}]}',
        b'{"items": [{"metadata": {"uid": "u", "name": "p", "namespace": "n"}, '
        b'"status": {"containerStatuses": [{"containerID": "containerd://' + b"1" * 64 + b'"}]}}]}',
        json.dumps({"items": [{"metadata": {"uid": "u", "name": "p" * 1025, "namespace": "n"}}]}).encode(),
        b"[" * 100000 + b"]" * 100000,
    ],
)
def test_malformed_shapes_are_refused(body: bytes) -> None:
    with pytest.raises(Exception) as caught:
        parse(body)
    assert getattr(caught.value, "kind", None) == "malformed", caught.value


def test_empty_and_null_items() -> None:
    assert parse(b'{"kind": "PodList", "items": []}') == {}
    assert parse(b'{"kind": "PodList", "items": null}') == {}
    assert parse(b'{"kind": "PodList"}') == {}


@pytest.mark.parametrize("url", ["http://127.0.0.1:10255/pods", "127.0.0.1:10250", "https:///pods"])
def test_url_must_be_https(url: str) -> None:
    with pytest.raises(ValueError, match="expected https://HOST"):
        KubeletPods(url)
