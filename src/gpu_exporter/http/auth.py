"""HTTP basic auth against the web config's bcrypt hashes, bounded so that wrong passwords cannot
starve anybody.

bcrypt is slow by design (cost 10: ~60 ms of a core), so the work is bounded and shared fairly:
at most :data:`RUNNING` checks at a time (one on a machine of 2 CPUs or fewer), off the event
loop; at most :data:`PENDING` waiting or running in all and one per client address (a client that
already has one waiting is told to retry, ``503``, after :data:`BUSY_DELAY`); a check that cannot
start within :data:`WAIT` seconds gives up the same way. Checks take
turns by suspicion: whether their address, and whether their user name, had a wrong password
(remembered until a login of that address or user succeeds). The least suspect go first; checks
suspect on both counts hold at most :data:`PENDING` less :data:`RESERVED` waiting places; a new
check takes the place of a more suspect one when all are taken. So wrong passwords from any number
of addresses delay a first login (a user never seen, or an address never seen) by a bcrypt or two,
not for as long as they last. Answers are remembered, as hashes: a verified (user, password, hash) is answered at
once (a scrape pays bcrypt once), and so is one already found wrong (retrying the same wrong
password costs nothing). Timing tells nothing about which users exist: an unknown user pays a
bcrypt of a cost chosen from the configured users' costs by a keyed hash of the name, so it looks
like some known user.
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

#: bcrypt checks at a time: 2, or 1 where the process may use at most 2 CPUs (bcrypt is all CPU:
#: two checks would take both, and the event loop that answers scrapes would wait for them).
RUNNING = 2 if len(os.sched_getaffinity(0)) > 2 else 1
#: Seconds a "busy" (503) answer waits before it goes out: a client that retries at once is held to
#: about one retry a second per connection instead of looping on the event loop.
BUSY_DELAY = 1.0
PENDING = 32
#: Waiting places kept for addresses with no wrong password on record.
RESERVED = 4
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
        self._keys: OrderedDict[bytes | str, None] = OrderedDict()

    def __contains__(self, key: bytes | str) -> bool:
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        return False

    def add(self, key: bytes | str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def discard(self, key: bytes | str) -> None:
        self._keys.pop(key, None)


class _Waiter:
    """A check waiting for a bcrypt slot: its future is set True when it gets one, False when a check
    of a lower :meth:`Credentials._suspicion` took its place."""

    def __init__(self, client: str, suspicion: int, order: int) -> None:
        self.client = client
        self.suspicion = suspicion
        self.order = order
        self.future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()


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
        self._running = 0
        self._waiting: list[_Waiter] = []
        self._order = 0
        self._failed = _Remembered(REMEMBERED * 4)  # client addresses that sent a wrong password
        self._failed_users = _Remembered(REMEMBERED * 4)  # user names a wrong password was sent for
        self._pending: dict[str, int] = {}
        self._total = 0
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
        suspicion = (client in self._failed) + (user in self._failed_users)
        if self._pending.get(client, 0) >= 1:
            return Verdict.BUSY, ""
        full = self._total >= (PENDING if suspicion < 2 else PENDING - RESERVED)
        if full and not self._displace(suspicion):
            return Verdict.BUSY, ""
        self._pending[client] = self._pending.get(client, 0) + 1
        self._total += 1
        if not await self._slot(client, suspicion):
            return Verdict.BUSY, ""
        work = asyncio.ensure_future(self._verify(user, secret, hashed, users))
        # A closed connection's bcrypt still holds its slot, and its verdict is still remembered.
        work.add_done_callback(lambda done: self._finished(client, key, done, user))
        if await asyncio.shield(work) and hashed is not None:
            return Verdict.OK, user
        return Verdict.WRONG, ""

    async def _slot(self, client: str, suspicion: int) -> bool:
        """Wait for a bcrypt slot (at most :data:`WAIT` seconds); False, with the client's waiting
        place given back, when none came or a cleaner check took the place."""
        if self._running < RUNNING and not self._waiting:
            self._running += 1
            return True
        self._order += 1
        waiter = _Waiter(client, suspicion, self._order)
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(WAIT):
                return await waiter.future
        except TimeoutError:  # no slot in time
            self._abandon(waiter)
            return False
        except BaseException:  # the connection was closed while waiting
            self._abandon(waiter)
            raise

    def _abandon(self, waiter: _Waiter) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)
            self._release(waiter.client)
        elif waiter.future.done() and not waiter.future.cancelled() and waiter.future.result():
            self._finished(waiter.client)  # the slot came as the wait ended: hand it on

    def _displace(self, suspicion: int) -> bool:
        """Give the waiting place of a check more suspect than ``suspicion`` (the latest of the most
        suspect) to a new one; False when there is none to give."""
        for waiter in sorted(self._waiting, key=lambda w: (-w.suspicion, -w.order)):
            if waiter.suspicion > suspicion and not waiter.future.done():
                self._waiting.remove(waiter)
                self._release(waiter.client)
                waiter.future.set_result(False)
                return True
        return False

    def _finished(
        self, client: str, key: bytes = b"", work: asyncio.Future[bool] | None = None, user: str = ""
    ) -> None:
        """A bcrypt ended: its verdict is remembered, its slot goes to the next waiter, those with no
        wrong password on record first."""
        if work is not None and not work.cancelled() and work.exception() is None:
            if work.result():
                self._good.add(key)
                self._failed.discard(client)
                self._failed_users.discard(user)
            else:
                self._bad.add(key)
                self._failed.add(client)
                self._failed_users.add(user)
        self._release(client)
        while self._waiting:
            waiter = min(self._waiting, key=lambda w: (w.suspicion, w.order))
            self._waiting.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_result(True)
                return
            self._release(waiter.client)  # cancelled, its task not yet resumed: its place is given back here
        self._running -= 1

    def _release(self, client: str) -> None:
        self._total -= 1
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
