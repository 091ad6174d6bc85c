"""What a registry's error answers say: the body of a refused request, read whatever the
request was, and the distribution error codes in it.

Spec: OCI distribution-spec v1.1, "error codes" (``{"errors": [{"code", "message",
"detail"}]}``).
"""

from __future__ import annotations

#: Most bytes of an error answer read to find the registry's error codes.
MAX_ERROR_BODY = 64 << 10


def error_body(resp) -> bytes:
    """The first :data:`MAX_ERROR_BODY` bytes of an error answer's body, whatever the request
    was: requests has already read the body of a non-streamed response (``PUT``, ``POST``,
    ``PATCH`` here) into ``resp.content``, and ``resp.raw`` is then empty; a streamed one is
    read from ``raw``, bounded. The response is closed. Never raises."""
    try:
        if getattr(resp, "_content_consumed", False) or getattr(resp, "_content", False) is not False:
            return (resp.content or b"")[:MAX_ERROR_BODY]
        return resp.raw.read(MAX_ERROR_BODY, decode_content=True) if resp.raw is not None else b""
    except Exception:  # noqa: BLE001 - the status alone is the message
        return b""
    finally:
        resp.close()


def error_detail(body: bytes) -> str:
    """``CODE: message; ...`` from a distribution error body (``{"errors": [{"code",
    "message", "detail"}]}``, distribution-spec "error codes"), ``""`` when it is not one.
    A short string ``detail`` (distribution puts the digest there) is appended."""
    import json

    try:
        errors = json.loads(body).get("errors") or []
    except (ValueError, AttributeError, UnicodeDecodeError):
        return ""
    parts = []
    for e in errors if isinstance(errors, list) else []:
        if not isinstance(e, dict):
            continue
        text = f"{e.get('code')}: {e.get('message')}"
        detail = e.get("detail")
        if isinstance(detail, str) and detail and len(detail) <= 200 and detail not in text:
            text += f" ({detail})"
        parts.append(text)
    return "; ".join(parts)


__all__ = ["error_body", "error_detail", "MAX_ERROR_BODY"]
