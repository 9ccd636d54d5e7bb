"""Basic auth's turns (gpu_exporter.http.auth.Credentials), in process with real bcrypt hashes of
cost 4: checks suspect on both counts (their address and their user had wrong passwords) wait
behind a first login and give it their place when all are taken."""

from __future__ import annotations

import asyncio
import base64

import bcrypt

from gpu_exporter.http import auth
from gpu_exporter.http.auth import PENDING, RESERVED, Credentials, Verdict

USERS = {name: bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)) for name, password in
         (("alice", "s3cret"), ("bob", "hunter2"))}  # fmt: skip


def _header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def _suspects(credentials: Credentials, count: int) -> None:
    """``count`` addresses, each with a wrong password for alice on record."""
    for n in range(count):
        verdict, _ = await credentials.check(USERS, _header("alice", f"wrong-{n}"), f"10.0.0.{n}")
        assert verdict is Verdict.WRONG


def test_a_first_login_goes_before_suspect_checks() -> None:
    async def main() -> tuple[Verdict, int]:
        credentials = Credentials()
        await _suspects(credentials, 40)
        finished: list[str] = []

        async def check(header: str, client: str) -> Verdict:
            verdict, _ = await credentials.check(USERS, header, client)
            if verdict is not Verdict.BUSY:  # a bcrypt was run for it
                finished.append(client)
            return verdict

        flood = [asyncio.create_task(check(_header("alice", f"again-{n}"), f"10.0.0.{n}")) for n in range(40)]
        await asyncio.sleep(0)  # the flood is waiting
        bob = await check(_header("bob", "hunter2"), "10.9.9.9")
        verdicts = await asyncio.gather(*flood)
        assert verdicts.count(Verdict.BUSY) == 40 - (PENDING - RESERVED)  # suspects hold 28 places at most
        return bob, finished.index("10.9.9.9")

    bob, position = asyncio.run(main())
    assert bob is Verdict.OK
    assert position <= auth.RUNNING  # behind the checks already running, ahead of those waiting


def test_a_first_login_takes_a_suspects_place_when_all_are_taken() -> None:
    async def main() -> list[Verdict]:
        credentials = Credentials()
        await _suspects(credentials, 40)
        both = [asyncio.create_task(credentials.check(USERS, _header("alice", f"x-{n}"), f"10.0.0.{n}"))
                for n in range(PENDING - RESERVED)]  # fmt: skip
        one = [
            asyncio.create_task(credentials.check(USERS, _header("alice", f"y-{n}"), f"10.1.0.{n}"))
            for n in range(RESERVED)
        ]  # fmt: skip  (new addresses, a suspect user: the reserved places)
        await asyncio.sleep(0)
        first = await credentials.check(USERS, _header("bob", "hunter2"), "10.9.9.9")
        rest = [verdict for verdict, _ in await asyncio.gather(*both, *one)]
        return [first[0], *rest]

    first, *rest = asyncio.run(main())
    assert first is Verdict.OK
    assert rest.count(Verdict.BUSY) == 1 and rest[: PENDING - RESERVED].count(Verdict.BUSY) == 1  # a suspect gave way
