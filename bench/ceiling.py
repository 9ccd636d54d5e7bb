"""The ceiling: the fastest a Python ASGI exporter could answer a scrape.

A minimal starlette app on uvicorn that serves, from memory, bytes captured from gpu-exporter
(same body, same content type), with the same uvicorn settings gpu-exporter uses (h11, asyncio,
no access log, no server header). It does no work per request beyond routing and sending.

    python -m bench.ceiling --port PORT --body FILE [--content-type TYPE]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def create_app(body: bytes, content_type: str = TEXT_CONTENT_TYPE) -> Starlette:
    """An app whose ``GET /metrics`` returns ``body`` as is."""

    async def metrics(_request: Request) -> Response:
        return Response(body, media_type=content_type)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", type=Path, required=True, help="file whose bytes /metrics serves")
    parser.add_argument("--content-type", default=TEXT_CONTENT_TYPE)
    args = parser.parse_args(argv)
    app = create_app(args.body.read_bytes(), args.content_type)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_config=None, access_log=False, lifespan="off", server_header=False
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
