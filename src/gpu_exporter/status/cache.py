"""The status page, its card fragment and its JSON, built off the event loop at most once per kind,
snapshot and second, whatever the number of clients asking: the first request builds on one worker
thread, requests meanwhile wait for the same bytes, later ones get them as made. The build keys
on the whole seconds of the snapshot's age too, so a stalled sampler still shows a growing age."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio
import anyio.to_thread

Key = tuple[int, int]  # (snapshot id, whole seconds of its age)


class StatusCache:
    """``build(kind)`` makes one kind's bytes for the current snapshot; :meth:`get` serves them."""

    def __init__(self, build: Callable[[str], bytes]) -> None:
        self._build = build
        self._limiter: anyio.CapacityLimiter | None = None
        self._made: dict[str, tuple[Key, bytes]] = {}
        self._making: dict[tuple[str, Key], asyncio.Future[bytes]] = {}

    async def get(self, kind: str, key: Key) -> bytes:
        """The bytes of ``kind`` for ``key``, built once."""
        made = self._made.get(kind)
        if made is not None and made[0] == key:
            return made[1]
        pending = self._making.get((kind, key))
        if pending is not None:
            return await asyncio.shield(pending)
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)  # one build at a time: building holds the GIL anyway
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: no warning
        self._making[(kind, key)] = future
        try:
            data = await anyio.to_thread.run_sync(self._build, kind, limiter=self._limiter)
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("status build cancelled"))
            raise
        finally:
            del self._making[(kind, key)]
        future.set_result(data)
        self._made[kind] = (key, data)
        return data
