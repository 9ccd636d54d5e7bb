"""HTTP basic auth against the web config's bcrypt hashes."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import Mapping


class Credentials:
    """Basic auth against bcrypt hashes; a verified (user, password, hash) is remembered so a scrape
    does not pay bcrypt's cost each time. Unknown users cost one bcrypt too (no timing oracle)."""

    def __init__(self) -> None:
        self._good: set[bytes] = set()
        self._busy = asyncio.Semaphore(2)
        self._dummies: dict[bytes, bytes] = {}  # cost → a hash of that cost, for unknown users

    def _dummy(self, users: Mapping[str, bytes]) -> bytes:
        """A hash as costly as the configured ones, so an unknown user takes as long as a known one."""
        cost = next(iter(users.values()), b"$2b$04$")[4:6]
        import bcrypt  # imported here: only a web config with users needs it (~0.7 MiB of RSS)

        if cost not in self._dummies:
            self._dummies[cost] = bcrypt.hashpw(b"not a password", bcrypt.gensalt(int(cost)))
        return self._dummies[cost]

    async def check(self, users: Mapping[str, bytes], header: str) -> str | None:
        """The user name when ``header`` carries valid credentials, else None."""
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or len(encoded) > 1024:
            return None
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep:
            return None
        hashed = users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed or b""))).digest()
        if hashed is not None and key in self._good:
            return user
        async with self._busy:  # bcrypt is CPU-bound by design: at most two at a time, off the loop
            reference = hashed if hashed is not None else await asyncio.to_thread(self._dummy, users)
            import bcrypt  # imported here: see _dummy

            ok = await asyncio.to_thread(bcrypt.checkpw, password.encode(), reference)
        if not ok or hashed is None:
            return None
        if len(self._good) > 1024:
            self._good.clear()
        self._good.add(key)
        return user
