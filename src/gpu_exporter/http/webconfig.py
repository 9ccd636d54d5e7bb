"""The exporter-toolkit web config file (``--web.config.file``): TLS, client certificates, basic auth.

The format is the one every Prometheus exporter reads (``tls_server_config``,
``http_server_config``, ``basic_auth_users``); relative file names are relative to the web config
file's directory. :func:`load` turns a file into an immutable :class:`WebConfig` (an
``ssl.SSLContext`` when TLS is configured, the users and their bcrypt hashes, extra response
headers) or raises :class:`WebConfigError` with one line naming the key. :class:`WebConfigSource`
re-reads the file when it or a file it names changes.

What Python's ssl module cannot do, and how it is handled: ``RequestClientCert`` and
``RequireAnyClientCert`` (accepting unverified client certificates) are refused with an error;
``curve_preferences`` is checked and ignored (a warning says so); TLS 1.3 cipher suites are always
on (``cipher_suites`` chooses among the TLS 1.2 ones, as in Go).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.files import FileProblem, load_yaml, quote, read_bytes, read_text

log = logging.getLogger(__name__)

FLAG = "--web.config.file"

_TLS_KEYS = (
    "cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
    "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
    "curve_preferences",
)  # fmt: skip
_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNSUPPORTED_AUTH = ("RequestClientCert", "RequireAnyClientCert")
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's TLS 1.0-1.2 cipher suite names (crypto/tls) → OpenSSL's names for the same suites.
_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
}
_TLS13_CIPHERS = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
_CURVES = ("CurveP256", "CurveP384", "CurveP521", "X25519", "X25519MLKEM768")
# The response headers exporter-toolkit allows, with the values it accepts (None: any).
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
_BCRYPT = re.compile(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$")
#: bcrypt costs accepted: below 4 bcrypt refuses; above 14 one check takes over a second of a core
#: (cost 31: days), so a scrape would time out and the checks would queue up.
MIN_COST, MAX_COST = 4, 14


class WebConfigError(ValueError):
    """The web config cannot be used; the message is one line naming the file and the key."""


@dataclass(frozen=True)
class WebConfig:
    """One loaded web config. ``tls`` is None for plain HTTP; ``users`` maps a user to a bcrypt
    hash (empty: no basic auth); ``headers`` are added to every response."""

    tls: ssl.SSLContext | None = None
    allowed_sans: frozenset[str] = frozenset()
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: tuple[tuple[bytes, bytes], ...] = ()
    files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


class _Reader:
    """Checks one file's values, collecting errors as one line each."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.directory = os.path.dirname(os.path.abspath(path))
        self.files: list[str] = [path]

    def fail(self, key: str, problem: str) -> WebConfigError:
        joiner = "" if problem.startswith("=") else " "
        return WebConfigError(f"{FLAG}={quote(self.path)}: {key}{joiner}{problem}")

    def mapping(self, key: str, value: object, allowed: tuple[str, ...] | None) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, not {type(value).__name__}")
        for name in value:
            if not isinstance(name, str):
                raise self.fail(key, f"has a key that is not a string: {quote(name)}")
            if allowed is not None and name not in allowed:
                raise self.fail(f"{key}.{quote(name, 40)[1:-1]}", f"is not a known key; allowed: {', '.join(allowed)}")
        return value

    def string(self, key: str, value: object) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, not {type(value).__name__}")
        return value

    def strings(self, key: str, value: object) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(key, "must be a list of strings")
        return list(value)

    def boolean(self, key: str, value: object, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"={quote(value)} must be true or false")
        return value

    def file_name(self, key: str, value: object) -> str:
        name = self.string(key, value)
        if not name:
            return ""
        resolved = name if os.path.isabs(name) else os.path.join(self.directory, name)
        try:
            read_bytes(resolved)
        except FileProblem as err:
            raise self.fail(key, f"={quote(name)} {err}") from None
        self.files.append(resolved)
        return resolved


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    """An inline PEM value as a private temporary file (ssl loads certificates and keys from files)."""
    handle = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)  # noqa: SIM115 # closed below
    try:
        with handle:
            handle.write(text)
        yield handle.name
    finally:
        os.unlink(handle.name)


class _Encrypted(Exception):
    """The private key asks for a passphrase."""


def _no_passphrase() -> str:
    """OpenSSL's passphrase callback: never prompt on a terminal (a daemon has none to answer)."""
    raise _Encrypted


def _tls(reader: _Reader, section: dict[str, Any], warnings: list[str]) -> tuple[ssl.SSLContext | None, frozenset[str]]:
    key = "tls_server_config"
    cert_file = reader.file_name(f"{key}.cert_file", section.get("cert_file"))
    key_file = reader.file_name(f"{key}.key_file", section.get("key_file"))
    ca_file = reader.file_name(f"{key}.client_ca_file", section.get("client_ca_file"))
    cert = reader.string(f"{key}.cert", section.get("cert"))
    private = reader.string(f"{key}.key", section.get("key"))
    client_ca = reader.string(f"{key}.client_ca", section.get("client_ca"))
    auth = reader.string(f"{key}.client_auth_type", section.get("client_auth_type"))
    if not (cert_file or key_file or ca_file or cert or private or client_ca or auth):
        return None, frozenset()
    pairs = ((cert, cert_file, "cert"), (private, key_file, "key"), (client_ca, ca_file, "client_ca"))
    for inline, path, name in pairs:
        if inline and path:
            raise reader.fail(f"{key}.{name}", f"and {key}.{name}_file are both given; give one")
    if not (cert or cert_file):
        raise reader.fail(f"{key}.cert_file", "is missing (TLS needs a certificate)")
    if not (private or key_file):
        raise reader.fail(f"{key}.key_file", "is missing (TLS needs the certificate's key)")
    auth = auth or "NoClientCert"
    if auth in _UNSUPPORTED_AUTH:
        raise reader.fail(
            f"{key}.client_auth_type",
            f"={quote(auth)} (an unverified client certificate) is not supported; use VerifyClientCertIfGiven "
            "or RequireAndVerifyClientCert with client_ca_file",
        )
    if auth not in _AUTH_TYPES:
        raise reader.fail(f"{key}.client_auth_type", f"={quote(auth)} is not one of {', '.join(_AUTH_TYPES)}")
    has_ca = bool(ca_file or client_ca)
    if auth == "NoClientCert" and has_ca:
        raise reader.fail(f"{key}.client_ca_file", "is given but client_auth_type is NoClientCert")
    if auth != "NoClientCert" and not has_ca:
        raise reader.fail(f"{key}.client_ca_file", f"is missing; client_auth_type {auth} needs it")
    sans = reader.strings(f"{key}.client_allowed_sans", section.get("client_allowed_sans"))
    if sans and auth != "RequireAndVerifyClientCert":
        raise reader.fail(f"{key}.client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = []
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        version = reader.string(f"{key}.{name}", section.get(name)) or default
        if version not in _VERSIONS:
            raise reader.fail(f"{key}.{name}", f"={quote(version)} is not one of {', '.join(_VERSIONS)}")
        versions.append(_VERSIONS[version])
    if versions[0] > versions[1]:
        raise reader.fail(f"{key}.min_version", "is above max_version")
    context.minimum_version, context.maximum_version = versions
    suites = reader.strings(f"{key}.cipher_suites", section.get("cipher_suites"))
    unknown = [suite for suite in suites if suite not in _CIPHERS and suite not in _TLS13_CIPHERS]
    if unknown:
        raise reader.fail(f"{key}.cipher_suites", f"has {quote(unknown[0])}, not a supported Go cipher suite name")
    chosen = [_CIPHERS[suite] for suite in suites if suite in _CIPHERS]
    if chosen:
        try:
            context.set_ciphers(":".join(dict.fromkeys(chosen)))
        except ssl.SSLError:
            raise reader.fail(f"{key}.cipher_suites", "names no suite this OpenSSL offers") from None
    if reader.boolean(f"{key}.prefer_server_cipher_suites", section.get("prefer_server_cipher_suites"), True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = reader.strings(f"{key}.curve_preferences", section.get("curve_preferences"))
    bad_curves = [curve for curve in curves if curve not in _CURVES]
    if bad_curves:
        raise reader.fail(f"{key}.curve_preferences", f"has {quote(bad_curves[0])}; known: {', '.join(_CURVES)}")
    if curves:
        warnings.append("tls_server_config.curve_preferences is ignored: Python's ssl uses OpenSSL's default groups")
    try:
        with contextlib.ExitStack() as stack:
            certfile = cert_file or stack.enter_context(_pem_file(cert))
            keyfile = key_file or stack.enter_context(_pem_file(private))
            context.load_cert_chain(certfile, keyfile, password=_no_passphrase)
    except _Encrypted:
        raise reader.fail(
            f"{key}.key_file",
            "is encrypted (it has a passphrase, which gpu-exporter cannot be given); "
            "write it without one: openssl pkey -in KEY -out KEY.plain",
        ) from None
    except (ssl.SSLError, OSError) as err:
        why = getattr(err, "reason", None) or err.strerror or str(err)
        raise reader.fail(f"{key}.cert_file", f"and key_file cannot be used: {why}") from None
    if has_ca:
        try:
            context.load_verify_locations(cadata=client_ca or read_text(ca_file))
        except (ssl.SSLError, FileProblem, ValueError) as err:
            why = getattr(err, "reason", None) or str(err)
            raise reader.fail(f"{key}.client_ca_file", f"holds no usable CA certificate: {why}") from None
        context.verify_mode = _AUTH_TYPES[auth]
    context.set_alpn_protocols(["http/1.1"])
    return context, frozenset(sans)


def load(path: str) -> WebConfig:
    """Read and check a web config file; :class:`WebConfigError` names the key that is wrong."""
    reader = _Reader(path)
    try:
        data = load_yaml(read_text(path))
    except FileProblem as err:
        raise WebConfigError(f"{FLAG}={quote(path)} {err}") from None
    top = reader.mapping("the file", data, None)
    for name in top:
        if name == "rate_limit":
            raise reader.fail("rate_limit", "is not supported by gpu-exporter; remove it")
        if name not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise reader.fail(
                quote(name, 40), "is not a known key; allowed: tls_server_config, http_server_config, basic_auth_users"
            )
    warnings: list[str] = []
    tls, sans = _tls(reader, reader.mapping("tls_server_config", top.get("tls_server_config"), _TLS_KEYS), warnings)
    http = reader.mapping("http_server_config", top.get("http_server_config"), ("http2", "headers"))
    http2 = reader.boolean("http_server_config.http2", http.get("http2"), False)  # checked even when unset
    if http2 and tls is not None:  # asked for explicitly: exporter-toolkit's default (on) is no request
        warnings.append("http_server_config.http2: only HTTP/1.1 is served (Prometheus scrapes over HTTP/1.1)")
    headers = []
    for name, value in reader.mapping("http_server_config.headers", http.get("headers"), None).items():
        allowed = next((known for known in _HEADERS if known.lower() == name.lower()), None)
        if allowed is None:
            known = ", ".join(_HEADERS)
            raise reader.fail(f"http_server_config.headers.{quote(name, 40)[1:-1]}", f"is not one of {known}")
        text = reader.string(f"http_server_config.headers.{allowed}", value)
        values = _HEADERS[allowed]
        if not text:
            continue
        if (values is not None and text.lower() not in values) or not text.isprintable() or not text.isascii():
            expected = f"one of {', '.join(values)}" if values else "printable ASCII"
            raise reader.fail(f"http_server_config.headers.{allowed}", f"={quote(text)} is not allowed: use {expected}")
        headers.append((allowed.lower().encode(), text.encode()))
    users = {}
    for user, hashed in reader.mapping("basic_auth_users", top.get("basic_auth_users"), None).items():
        text = reader.string(f"basic_auth_users.{quote(user, 40)[1:-1]}", hashed)
        if ":" in user or not user.isprintable():
            raise reader.fail(f"basic_auth_users.{quote(user, 40)[1:-1]}", "is not a usable user name (no ':')")
        if not _BCRYPT.match(text):
            raise reader.fail(
                f"basic_auth_users.{quote(user, 40)[1:-1]}", "is not a bcrypt hash ($2y$10$ and 53 characters)"
            )
        cost = int(text.split("$")[2])
        if not MIN_COST <= cost <= MAX_COST:
            raise reader.fail(
                f"basic_auth_users.{quote(user, 40)[1:-1]}",
                f"has bcrypt cost {cost}, outside {MIN_COST}-{MAX_COST} (each cost step doubles a check's time: "
                f"cost 14 is about a second of CPU); hash it again, e.g. htpasswd -nBC 10 {quote(user, 40)}",
            )
        users[user] = text.encode()
    return WebConfig(tls, sans, users, tuple(headers), tuple(reader.files), tuple(warnings))


def _signature(files: tuple[str, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    result: list[tuple[int, int, int] | None] = []
    for name in files:
        try:
            info = os.stat(name)
            result.append((info.st_mtime_ns, info.st_size, info.st_ino))
        except OSError:
            result.append(None)
    return tuple(result)


def _strength(config: WebConfig) -> tuple[bool, int, bool, bool]:
    """What a config demands of a client: TLS, client certificate mode, allowed SANs, basic auth."""
    mode = int(config.tls.verify_mode) if config.tls is not None else 0
    return config.tls is not None, mode, bool(config.allowed_sans), bool(config.users)


def weakened(old: WebConfig, new: WebConfig) -> list[str]:
    """The protections ``new`` drops that ``old`` had (TLS, client certificates, SANs, basic auth)."""
    names = ("TLS", "client certificate verification", "client_allowed_sans", "basic auth")
    return [name for name, was, now in zip(names, _strength(old), _strength(new), strict=True) if now < was]


class WebConfigSource:
    """The current web config, re-read when the file or one it names changes.

    A file rewritten in place passes through cut-short states (empty, or cut before
    ``basic_auth_users``) that are valid YAML. So a change is loaded only once the files have held
    still for one whole check (at least :attr:`CHECK_EVERY` seconds) and did not change while they
    were read; and a change noticed on its own is never applied when it drops a protection the
    running config has (TLS, client certificate verification, SANs, basic auth): that needs SIGHUP
    or a restart. Any error keeps the previous config in force, logs one line and keeps watching.
    """

    CHECK_EVERY = 1.0

    def __init__(self, path: str) -> None:
        self.path = path
        self.config = load(path) if path else WebConfig()
        self._signature = _signature(self.config.files)
        self._pending: tuple[tuple[int, int, int] | None, ...] | None = None
        self._checked = time.monotonic()
        for warning in self.config.warnings:
            log.warning("%s", warning)

    def current(self) -> WebConfig:
        """The config in force, after a cheap check whether its files changed."""
        now = time.monotonic()
        if self.path and now - self._checked >= self.CHECK_EVERY:
            self._checked = now
            signature = _signature(self.config.files)
            if signature == self._signature:
                self._pending = None
            elif signature != self._pending:
                self._pending = signature  # changed since the last look: wait until it holds still
            else:
                self._pending = None
                self.reload(automatic=True)
        return self.config

    def reload(self, path: str | None = None, automatic: bool = False) -> bool:
        """Load the file again (or a new ``path``); True when the new config is in force.
        ``automatic``: noticed by the file check, not asked for by SIGHUP."""
        path = self.path if path is None else path
        before = _signature(self.config.files) if path == self.path else None
        try:
            config = load(path) if path else WebConfig()
            if before is not None and _signature(self.config.files) != before:
                raise WebConfigError(
                    f"{FLAG}={quote(path)} changed while it was read; it is read again once it holds still"
                )
            dropped = weakened(self.config, config) if automatic else []
            if dropped:
                raise WebConfigError(
                    f"{FLAG}={quote(path)} as changed turns off {', '.join(dropped)} (a file cut short while it is "
                    "rewritten looks the same); send SIGHUP or restart to apply it, or write the file whole "
                    "(write a new file and rename it over the old one)"
                )
        except Exception as err:  # noqa: BLE001 # any failure keeps the running config: one line, no traceback
            log.error("web config not reloaded, the previous one stays in force: %s", _one_line(err))
            self._signature = _signature(self.config.files)
            return False
        self.path, self.config = path, config
        self._signature = _signature(config.files)
        log.info("web config %s loaded (TLS %s, %d basic auth users)", path or "(none)", "on" if config.tls else "off",
                 len(config.users))  # fmt: skip
        for warning in config.warnings:
            log.warning("%s", warning)
        return True


def _one_line(err: Exception) -> str:
    text = str(err) if isinstance(err, WebConfigError) else f"{type(err).__name__}: {err}"
    return " ".join(text.split())[:500]
