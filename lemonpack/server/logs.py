"""The server's logging: one access line per request, engine output, the line formats.

Loggers: ``lemonpack.server.access`` (one record per proxied request, fields ``model``,
``route``, ``status``, ``bytes``, ``ttfb_ms``, ``total_ms``; status 499: the client left),
``lemonpack.server.engine`` (every line an engine prints on stdout or stderr, field
``model``), ``lemonpack.server`` (the rest). :func:`configure_logging` sends them to stderr,
one line each: ``msg key=value ...`` (:class:`TextLogFormatter`; an engine line reads
``[MODEL] LINE``) or one JSON object (:class:`JsonLogFormatter`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from lemonpack.server.body import clip

access_log = logging.getLogger("lemonpack.server.access")
engine_log = logging.getLogger("lemonpack.server.engine")


def log_request(fields: dict[str, Any]) -> None:
    """The access line of one request (``fields`` as in the module docstring): the record
    ``access_log.info("request", extra={"fields": fields})`` would make, handled by the
    logger as usual (its filters and handlers). With the stock record factory it is a copy
    of one record made once per thread and process, its times and fields renewed: no look-up
    of the caller's frame, no thread, process or file name work per request
    (``bench/proxy.py``: the request's hot path); it names this function."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    now = time.time()
    key = (threading.get_ident(), os.getpid())
    first = _TEMPLATE.get(key)
    stock = logging.getLogRecordFactory() is logging.LogRecord
    if first is None and stock:  # made once (never handed to a handler: nothing they set is copied)
        first = access_log.makeRecord(_ACCESS, logging.INFO, __file__, _LINE, "request", (), None, "log_request")
        _TEMPLATE.clear()
        _TEMPLATE[key] = first
    if first is None or not stock:
        record = access_log.makeRecord(_ACCESS, logging.INFO, __file__, _LINE, "request", (), None, "log_request",
                                       {"fields": fields})
    else:
        record = object.__new__(logging.LogRecord)
        attrs = record.__dict__
        attrs.update(first.__dict__)
        attrs["created"] = now
        attrs["msecs"] = int((now - int(now)) * 1000) + 0.0
        attrs["relativeCreated"] = first.relativeCreated + (now - first.created) * 1000
        attrs["fields"] = fields
    access_log.handle(record)


_ACCESS = access_log.name
_LINE = log_request.__code__.co_firstlineno
_TEMPLATE: dict[tuple[int, int], logging.LogRecord] = {}  # (thread, process) -> the first record


def engine_output(model: str, engine: Any) -> None:
    """Show ``engine``'s output (its :class:`~lemonpack.runtime.engines.logs.LogRing`, replayed from
    its start) on the ``lemonpack.server.engine`` logger, one record per line. Called from
    the runner's ``on_spawn`` (any thread): the logging handlers are thread-safe."""
    name = clip(model, 200)

    def line(text: str) -> None:
        engine_log.info("%s", text, extra={"fields": {"model": name}, "engine_line": True})

    engine.logs.subscribe(line, replay=True)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``msg`` and the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        doc.update(getattr(record, "fields", {}) or {})
        return json.dumps(doc)


class TextLogFormatter(logging.Formatter):
    """``msg key=value ...`` lines; an engine's output line as ``[MODEL] LINE``."""

    def format(self, record: logging.LogRecord) -> str:
        attrs = record.__dict__
        fields = attrs.get("fields") or {}
        if attrs.get("engine_line"):
            return f"[{fields.get('model', '')}] {record.getMessage()}"
        msg = record.getMessage()
        return msg + "".join([f" {k}={v}" for k, v in fields.items()]) if fields else msg


class ClientFaultFilter(logging.Filter):
    """On aiohttp's server logger: a malformed request (``BadHttpMessage``, any
    ``HttpProcessingError``) or a client that left (``ConnectionError``) is the client's fault
    and is answered (400) or moot: log it as one line without a traceback, its text clipped."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (HttpProcessingError, ConnectionError)):
            what = " ".join(str(getattr(exc, "message", None) or exc).split())[:300]
            record.msg, record.args = "%s: %s: %s", (record.getMessage(), type(exc).__name__, what)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure_logging(json_logs: bool, engine_output: bool = True) -> Callable[[], None]:
    """Send ``lemonpack.server`` records to stderr, one line each (JSON with ``json_logs``),
    instead of the CLI's warning handler; ``engine_output`` False silences the engines'
    lines. Returns a function that undoes it (so serving twice in one process does not stack
    handlers)."""
    h = logging.StreamHandler()
    h.setFormatter(JsonLogFormatter() if json_logs else TextLogFormatter())
    quiet = ClientFaultFilter()
    aio = logging.getLogger("aiohttp.server")
    aio.addFilter(quiet)
    lg = logging.getLogger("lemonpack.server")
    before = (lg.level, lg.propagate, engine_log.level)
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    lg.propagate = False
    engine_log.setLevel(logging.INFO if engine_output else logging.WARNING)

    def undo() -> None:
        aio.removeFilter(quiet)
        lg.removeHandler(h)
        lg.setLevel(before[0])
        lg.propagate = before[1]
        engine_log.setLevel(before[2])
    return undo


__all__ = ["access_log", "engine_log", "log_request", "engine_output", "JsonLogFormatter", "TextLogFormatter",
           "ClientFaultFilter", "configure_logging"]
