"""The server's error answers: the OpenAI error envelope, and the middleware that turns every
failure of a handler into one (never aiohttp's plain-text 500)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from lemonpack.errors import LemonpackError
from lemonpack.runtime.selection.selector import BackendSelectionError
from lemonpack.server.body import BadBody, clip

log = logging.getLogger("lemonpack.server")


def error(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None,
          code: str | None = None) -> web.Response:
    """The OpenAI error envelope ``{"error": {"message", "type"}}`` (plus ``code`` when given)
    with ``status``."""
    doc = {"message": message, "type": kind}
    if code is not None:
        doc["code"] = code
    return web.json_response({"error": doc}, status=status, headers=headers)


def sse_error(message: str, kind: str = "upstream_error", code: str = "stream_cut") -> bytes:
    """The last event of a stream that could not end normally: ``event: error`` with the
    OpenAI error shape as its data (the ``openai`` client raises ``APIError`` on it). It
    starts with an empty line, so it never joins a partly sent event."""
    doc = {"error": {"message": message, "type": kind, "code": code}}
    return b"\nevent: error\ndata: " + json.dumps(doc).encode() + b"\n\n"


def selection_error(e: BackendSelectionError) -> web.Response:
    """HTTP 400 ``backend_selection_error``; ``code`` is the selector's kind (``unknown``,
    ``unavailable``, ``cannot-serve``; ``no-backend`` when nothing serves a model file)."""
    kind = getattr(e, "kind", None) or "no-backend"
    return error(400, "backend_selection_error", f"{kind}: {e}", code=kind)


class Rejected(Exception):
    """The policy answered a request without an engine (``status``, OpenAI error ``kind``)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind

    def response(self) -> web.Response:
        """The error answer (``Retry-After: 1`` on 429 and 503)."""
        headers = {"Retry-After": "1"} if self.status in (429, 503) else None
        return error(self.status, self.kind, str(self), headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure of a handler answers in the OpenAI error shape, never aiohttp's plain
    text 500: a bad body 400 ``invalid_request_error``; a LemonpackError (a registry or
    recipe that cannot be read) 500 ``server_error`` with its message, logged on one line;
    anything else 500 ``server_error``, logged with its traceback (a bug of ours)."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BadBody as e:
        return error(e.status, e.kind, str(e), headers=e.headers)
    except LemonpackError as e:
        log.warning("%s %s: %s", request.method, clip(request.path), clip(e, 2000))
        return error(500, "server_error", str(e)[:2000])
    except ConnectionError:
        return web.Response(status=499)  # the client left: nothing to answer, nothing to log
    except Exception as e:  # noqa: BLE001 (answered, and logged with its traceback)
        log.exception("%s %s failed", request.method, clip(request.path))
        return error(500, "server_error", f"internal error: {type(e).__name__}: {str(e)[:500]}")


__all__ = ["error", "selection_error", "Rejected", "errors_middleware", "sse_error"]
