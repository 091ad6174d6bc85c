"""What a registry's error answers say: the body of a refused request, read whatever the
request was, and the distribution error codes in it.

Spec: OCI distribution-spec v1.1, "error codes" (``{"errors": [{"code", "message",
"detail"}]}``).
"""

from __future__ import annotations

from lemonpack.errors import FetchError, NotFoundError

#: Most bytes of an error answer read to find the registry's error codes.
MAX_ERROR_BODY = 64 << 10


def error_body(resp) -> bytes:
    """The first :data:`MAX_ERROR_BODY` bytes of an error answer's body (an ``httpx.Response``),
    whatever the request was: a non-streamed response (``PUT``, ``POST``, ``PATCH`` here) has
    its body in ``resp.content`` already; a streamed one is read (decoded) until
    :data:`MAX_ERROR_BODY` bytes, the rest left unread. The response is closed. Never raises."""
    import httpx

    try:
        try:
            return (resp.content or b"")[:MAX_ERROR_BODY]
        except httpx.ResponseNotRead:
            pass
        buf = bytearray()
        for chunk in resp.iter_bytes():
            buf += chunk
            if len(buf) >= MAX_ERROR_BODY:
                break
        return bytes(buf[:MAX_ERROR_BODY])
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


def error_codes(body: bytes) -> tuple[str, ...]:
    """The ``code`` of each error of a distribution error body (``("MANIFEST_UNKNOWN",)``),
    ``()`` when it is not one (distribution-spec "error codes")."""
    import json

    try:
        errors = json.loads(body).get("errors") or []
    except (ValueError, AttributeError, UnicodeDecodeError):
        return ()
    return tuple(one_code for e in (errors if isinstance(errors, list) else [])
                 if isinstance(e, dict) and isinstance(one_code := e.get("code"), str))


class RegistryAnswerError(FetchError):
    """A request the registry refused with an HTTP status (a :class:`FetchError`, exit 4):
    ``status`` (``404``) and ``codes``, the distribution error codes of its body
    (``("MANIFEST_UNKNOWN",)``, possibly empty), so callers can tell "not there" from other
    refusals without reading the message."""

    def __init__(self, message: str, status: int, codes: tuple[str, ...] = ()):
        self.status, self.codes = status, codes
        super().__init__(message)


class ImageNotFoundError(NotFoundError, FetchError):
    """The registry has no image by the tag or digest pulled (its manifest ``GET`` answered
    404, e.g. ``MANIFEST_UNKNOWN``): ``no such image: REF (the registry answered CODE)``. A
    :class:`NotFoundError` (exit 1, kind ``not-found``, as every "what you named does not
    exist"), and a :class:`FetchError` so that :func:`pull_image` tries the next source when a
    mirror lacks it."""

    exit_code = 1
    kind = "not-found"

    @classmethod
    def of(cls, ref: str, answer: RegistryAnswerError) -> ImageNotFoundError:
        """The error for ``ref`` from the 404 ``answer`` of its manifest ``GET``."""
        return cls(f"no such image: {ref} (the registry answered {', '.join(answer.codes) or 'HTTP 404'})")


__all__ = ["ImageNotFoundError", "RegistryAnswerError", "error_body", "error_codes", "error_detail", "MAX_ERROR_BODY"]
