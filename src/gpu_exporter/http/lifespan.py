"""The ASGI lifespan protocol, as the server runs it around the app: startup before serving,
shutdown after."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


class Lifespan:
    """Runs the ASGI lifespan protocol: startup before serving, shutdown after."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.replies: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _main(self) -> None:
        scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self.queue.get, self.replies.put)
        except Exception as err:  # noqa: BLE001 # reported as a startup/shutdown failure with its reason
            await self.replies.put({"type": "lifespan.failed", "message": f"{type(err).__name__}: {err}"})

    async def _exchange(self, kind: str) -> str | None:
        await self.queue.put({"type": f"lifespan.{kind}"})
        reply = await self.replies.get()
        if reply["type"] == f"lifespan.{kind}.complete":
            return None
        return str(reply.get("message") or reply["type"])

    async def startup(self) -> str | None:
        self.task = asyncio.create_task(self._main())
        return await self._exchange("startup")

    async def shutdown(self) -> str | None:
        if self.task is None or self.task.done():
            return None
        result = await self._exchange("shutdown")
        with contextlib.suppress(Exception):
            await self.task
        return result
