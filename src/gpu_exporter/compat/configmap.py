"""dcgm-exporter's ``-m/--configmap-data NAMESPACE:NAME``: the counters CSV read once at start from
a Kubernetes ConfigMap's ``metrics`` key through the in-cluster API.

The API server is ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT`` (set in every pod), the
pod's service-account token authenticates and its CA verifies the server (the files of
``--kubernetes.kubelet-token-file`` and ``--kubernetes.kubelet-ca-file``, by default the service
account's). The pod's service account needs ``get`` on that ConfigMap. A failure raises
:class:`ConfigMapError` with one line that never contains the token.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

MAX_BYTES = 1024 * 1024
TIMEOUT_SECONDS = 10.0


class ConfigMapError(RuntimeError):
    """The ConfigMap could not be read; ``content`` is True when it was read but holds no counters."""

    def __init__(self, message: str, content: bool = False) -> None:
        super().__init__(message)
        self.content = content


def _token(path: str) -> str:
    try:
        with open(path, "rb") as file:
            token = file.read(64 * 1024 + 1).decode("ascii", "replace").strip()
    except OSError as err:
        raise ConfigMapError(f"cannot read the service-account token {path}: {err.strerror}") from None
    if not token or len(token) > 64 * 1024 or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigMapError(f"the service-account token file {path} holds no usable token")
    return token


def read_counters(spec: str, env: Mapping[str, str], token_file: str, ca_file: str) -> str:
    """The ``metrics`` text of ConfigMap ``NAMESPACE:NAME`` (``spec``)."""
    where = f"--configmap-data={spec}"
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigMapError(f"{where}: KUBERNETES_SERVICE_HOST is not set (not in a pod?); mount it and use -f")
    namespace, _, name = spec.partition(":")
    host = f"[{host}]" if ":" in host else host
    path = f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/configmaps/{urllib.parse.quote(name, safe='')}"
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as err:
        raise ConfigMapError(f"{where}: cannot load the CA file {ca_file}: {err}") from None
    request = urllib.request.Request(
        f"https://{host}:{port}{path}",
        headers={"Authorization": f"Bearer {_token(token_file)}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=TIMEOUT_SECONDS) as answer:
            body = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise ConfigMapError(f"{where}: the API server answered {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise ConfigMapError(f"{where}: cannot reach the API server at {host}:{port}: {reason}") from None
    if len(body) > MAX_BYTES:
        raise ConfigMapError(f"{where}: the ConfigMap is larger than {MAX_BYTES} bytes", content=True)
    try:
        data = json.loads(body)["data"]
        text = data["metrics"]
    except (ValueError, KeyError, TypeError):
        raise ConfigMapError(f"{where}: the ConfigMap has no 'metrics' key (dcgm-exporter's layout)", True) from None
    if not isinstance(text, str):
        raise ConfigMapError(f"{where}: its 'metrics' key is not text", content=True)
    return text
