"""HTTP basic auth against the web config's bcrypt hashes, bounded so that wrong passwords cannot
starve anybody.

bcrypt is slow by design (cost 10: ~60 ms of a core), so the work is bounded three ways: at most
:data:`RUNNING` checks at a time, off the event loop; at most :data:`PENDING` waiting or running in
all and one per client address (a client that already has one waiting is told to retry, ``503``);
and a check that cannot start within :data:`WAIT` seconds gives up the same way. Answers are
remembered, as hashes: a verified (user, password, hash) is answered at once (a scrape pays bcrypt
once), and so is one already found wrong (retrying the same wrong password costs nothing).
Timing tells nothing about which users exist: an unknown user pays a bcrypt of a cost chosen from
the configured users' costs by a keyed hash of the name, so it looks like some known user.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Mapping

RUNNING = 2
PENDING = 32
WAIT = 5.0
REMEMBERED = 1024
MAX_PASSWORD_BYTES = 72  # bcrypt uses at most 72 bytes; a longer password is wrong, as in Go's bcrypt


class Verdict(enum.Enum):
    """What a check found: the user (``ok``), wrong credentials, or no capacity to check now."""

    OK = "ok"
    WRONG = "wrong"
    BUSY = "busy"


class _Remembered:
    """A bounded set, least recently used first out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        return False

    def add(self, key: bytes) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)


def _checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt  # imported here: only a web config with users needs it (~0.7 MiB of RSS)

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # a hash bcrypt cannot use (the web config checks the form and the cost)
        return False


def _hash_of_cost(cost: int) -> bytes:
    import bcrypt  # imported here: see _checkpw

    return bytes(bcrypt.hashpw(b"not a password", bcrypt.gensalt(cost)))


class Credentials:
    """Basic auth against bcrypt hashes (see the module's docstring for the bounds)."""

    def __init__(self) -> None:
        self._good = _Remembered(REMEMBERED)
        self._bad = _Remembered(REMEMBERED * 4)
        self._running = asyncio.Semaphore(RUNNING)
        self._pending: dict[str, int] = {}
        self._dummies: dict[int, bytes] = {}  # cost → a hash of that cost, for unknown users
        self._secret = os.urandom(16)

    def _cost_for(self, user: str, users: Mapping[str, bytes]) -> int:
        """An unknown user's cost: one of the configured users' costs, picked by a keyed hash of the name."""
        costs = sorted(int(hashed.split(b"$")[2]) for hashed in users.values()) or [4]
        pick = hmac.new(self._secret, user.encode(errors="replace"), hashlib.sha256).digest()
        return costs[int.from_bytes(pick[:4], "big") % len(costs)]

    async def check(self, users: Mapping[str, bytes], header: str, client: str = "") -> tuple[Verdict, str]:
        """The verdict on ``header`` from ``client`` (its address), and the user name when OK."""
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or len(encoded) > 1024:
            return Verdict.WRONG, ""
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return Verdict.WRONG, ""
        if not sep:
            return Verdict.WRONG, ""
        hashed = users.get(user)
        secret = password.encode()
        key = hashlib.sha256(b"\0".join((user.encode(), secret, hashed or b""))).digest()
        if hashed is not None and key in self._good:
            return Verdict.OK, user
        if key in self._bad:
            return Verdict.WRONG, ""
        if self._pending.get(client, 0) >= 1 or sum(self._pending.values()) >= PENDING:
            return Verdict.BUSY, ""
        self._pending[client] = self._pending.get(client, 0) + 1
        try:
            async with asyncio.timeout(WAIT):
                await self._running.acquire()
        except TimeoutError:  # no slot in time
            self._release(client)
            return Verdict.BUSY, ""
        except BaseException:  # the connection was closed while waiting
            self._release(client)
            raise
        work = asyncio.ensure_future(self._verify(user, secret, hashed, users))
        work.add_done_callback(lambda _: self._finished(client))  # a closed connection's bcrypt still holds its slot
        ok = await asyncio.shield(work)
        if not ok or hashed is None:
            self._bad.add(key)
            return Verdict.WRONG, ""
        self._good.add(key)
        return Verdict.OK, user

    def _finished(self, client: str) -> None:
        self._running.release()
        self._release(client)

    def _release(self, client: str) -> None:
        left = self._pending.get(client, 1) - 1
        if left > 0:
            self._pending[client] = left
        else:
            self._pending.pop(client, None)

    async def _verify(self, user: str, secret: bytes, hashed: bytes | None, users: Mapping[str, bytes]) -> bool:
        """One bcrypt, off the loop; as costly for an unknown user or a too-long password as for a real check."""
        if hashed is None:
            cost = self._cost_for(user, users)
            if cost not in self._dummies:
                self._dummies[cost] = await asyncio.to_thread(_hash_of_cost, cost)
            reference = self._dummies[cost]
        else:
            reference = hashed
        too_long = len(secret) > MAX_PASSWORD_BYTES or b"\0" in secret
        ok = await asyncio.to_thread(_checkpw, b"-" if too_long else secret, reference)
        return ok and not too_long and hashed is not None
