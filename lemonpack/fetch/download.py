"""Downloads that verify sha256 while streaming, into the content-addressed cache.

Flow of :func:`fetch`: warm cache hit (expected digest known, entry present and still
hashing to its name, :meth:`ArtifactCache.verified`) returns with no network at all; a
corrupted entry is dropped and downloaded again. Otherwise the bytes are streamed (never held in
memory; a large body of known length read from the socket into one reused 1 MiB buffer,
:func:`lemonpack.httpclient.body`) from the mirror (if any) or the origin into a temp file in the cache directory, hashed as
they arrive, and only moved into the cache once the digest is checked. Any failure
(mismatch, HTTP status, network error, interruption) deletes the temp file.

Transport policy: only ``https`` and ``http`` URLs; plain ``http`` only to a loopback
host (127.0.0.0/8, ::1, ``localhost``) or through a :class:`Mirror` built with
``allow_insecure=True``. Redirects (RFC 9110, section 15.4) are followed by hand, at most
10, each hop checked against the same policy, and never from https down to http. Bytes
are requested with ``Accept-Encoding: identity`` and read raw, so what is hashed is what
the server stored (as curl and Nix's fetcher see it).
"""

from __future__ import annotations

import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lemonpack.hosts import is_loopback
from lemonpack.digest import Digest, Hasher, sha256_text
from lemonpack.errors import FetchError, IntegrityError
from lemonpack.fetch.cache import ArtifactCache
from lemonpack.fetch.mirror import Mirror

if TYPE_CHECKING:  # httpx is imported when a download happens: a cache hit never loads it
    import httpx

CHUNK_SIZE = 1 << 20
"""Bytes per read while streaming (1 MiB)."""

MAX_REDIRECTS = 10

READ_TIMEOUT = 60.0
"""Seconds a download's read or write may wait (one chunk, not the whole body)."""
CONNECT_TIMEOUT = 30.0
"""Seconds to connect to a mirror or an origin."""


def download_client() -> httpx.Client:
    """A new client (the caller closes it) with the download policy: :data:`READ_TIMEOUT`,
    :data:`CONNECT_TIMEOUT`, the environment's proxies and CA files honoured (``trust_env``,
    as curl and Nix's fetcher do), redirects left to :func:`fetch`'s checked hops. Made by
    :func:`lemonpack.httpclient.client` (imported here: a cache hit never loads httpx); the
    catalogue's documents are fetched with one too."""
    from lemonpack import httpclient

    return httpclient.client(timeout=READ_TIMEOUT, connect_timeout=CONNECT_TIMEOUT, trust_env=True)


@dataclass(frozen=True)
class Fetched:
    """A verified artifact in the cache.

    ``path``: the cache entry; ``sha256``: its 64-hex digest; ``url``: the URL as
    requested; ``fetched_from``: the URL the bytes came from (after mirror rewriting and
    redirects), or the entry's ``file://`` URI on a cache hit; ``from_cache``: True when no
    network was used; ``size``: bytes.
    """

    path: Path
    sha256: str
    url: str
    fetched_from: str
    from_cache: bool
    size: int


def check_redirect_hop(url: str, *, insecure_ok: bool, previous: str | None, requested: str) -> None:
    """Apply the transport policy to one request URL; raises ``FetchError``."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchError(f"refusing to fetch {requested}: scheme {scheme!r} of {url} is not http(s)")
    if scheme == "http":
        if previous is not None and urllib.parse.urlsplit(previous).scheme.lower() == "https":
            raise FetchError(f"refusing to fetch {requested}: redirect from {previous} down to plain http {url}")
        if not (insecure_ok or is_loopback(parts.hostname)):
            raise FetchError(
                f"refusing to fetch {requested}: plain http to non-loopback host {parts.hostname!r}"
                " (use https, or a mirror with --allow-insecure-mirror)")


def _parse_expected(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    try:
        return Digest.parse(sha256).hex
    except ValueError:
        raise ValueError(f"expected digest must be 'sha256:<64 lowercase hex>', got {sha256!r}") from None


def progress_bar(total: int | None, label: str):
    """A rich Progress on stderr with bytes, speed and ETA columns (rich.progress docs)."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=False)
    task = progress.add_task(label, total=total)
    return progress, task


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


class ProgressLines:
    """Transfer progress as plain lines, for a log or a pipe (where a progress bar shows nothing
    until it ends). Called with ``(done, total)`` bytes so far (``total`` None: unknown), or
    advanced with :meth:`advance`; ``write(line)`` gets ``LABEL: 40% (4.0 MiB of 10.0 MiB,
    2.1 MiB/s)`` with the first bytes, each time another ``step`` percent has arrived (100%
    last), and at least every ``interval`` seconds while bytes keep arriving (with an unknown
    total, only those, with the byte count); nothing while none arrive. ``clock``: monotonic
    seconds (tests inject one)."""

    def __init__(self, label: str, write: Callable[[str], None], *, total: int | None = None, step: int = 10,
                 interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        if not 1 <= step <= 100:
            raise ValueError(f"step must be 1..100 percent, got {step!r}")
        self.label, self.write, self.total, self.step, self.interval, self.clock = \
            label, write, total, step, interval, clock
        self.done = 0
        self._start = clock()
        self._last_time = self._start
        self._last_step = -1
        self._last_done = -1

    def advance(self, n: int) -> None:
        """``n`` more bytes arrived (of the ``total`` given at construction)."""
        self(self.done + n, self.total)

    def __call__(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total
        now = self.clock()
        pct = min(100, done * 100 // total) if total else None
        step = pct // self.step if pct is not None else -1
        due = (self._last_done < 0 or now - self._last_time >= self.interval) and done > self._last_done
        if not (pct is not None and step > self._last_step) and not due:
            return
        self._last_step, self._last_time, self._last_done = max(step, self._last_step), now, done
        elapsed = now - self._start
        rate = f", {_size(done / elapsed)}/s" if elapsed > 0 and done else ""
        if total and pct is not None:
            self.write(f"{self.label}: {pct}% ({_size(done)} of {_size(total)}{rate})")
        else:
            self.write(f"{self.label}: {_size(done)}{rate}")


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def byte_meter(total: int | None, label: str, enabled: bool, *,
               lines: Callable[[str], None] | None = None) -> Iterator[Callable[[int], None] | None]:
    """The progress of a transfer of ``total`` bytes (None: unknown), as a context manager
    yielding the ``on_bytes(n)`` callback (None, and nothing shown, when not ``enabled``): a
    rich bar on stderr (:func:`progress_bar`) when stderr is a terminal, else
    :class:`ProgressLines` written to stderr (or to ``lines``, a logger's function). The bar
    is stopped on exit, also on error. What every long download and upload shows: artifacts
    (:func:`fetch`), image and model pulls and pushes (``lemonpack.registry.transfer.byte_progress``)."""
    if not enabled:
        yield None
        return
    if lines is not None or not sys.stderr.isatty():
        meter = ProgressLines(label, lines or _stderr_line, total=total)
        yield meter.advance
        return
    bar, task = progress_bar(total, label)
    bar.start()
    try:
        yield lambda n: bar.update(task, advance=n)
    finally:
        bar.stop()


def fetch(url: str, *, sha256: str | None, cache: ArtifactCache, mirror: Mirror | None = None,
          progress: bool | None = None, client: httpx.Client | None = None) -> Fetched:
    """Fetch ``url`` into ``cache``, verifying its sha256; returns :class:`Fetched`.

    ``sha256``: ``"sha256:<64 hex>"``, or None for roll-forward (download, record the
    observed digest in ``Fetched.sha256``, verify nothing). ``mirror``: fetch from
    ``mirror.rewrite(url)`` instead of the origin (no fallback to the origin if the mirror
    fails; the transport policy applies to the mirror URL, the origin is only a key).
    ``progress``: show a rich progress bar
    on stderr (bytes, speed, ETA), or progress lines when stderr is no terminal
    (:func:`byte_meter`); None means "if stderr is a TTY". ``client``: an
    ``httpx.Client`` to use (not closed); default a fresh one.

    Raises ``IntegrityError(url, expected, actual)`` (both ``sha256:<hex>``) on mismatch,
    leaving nothing in the cache; ``FetchError`` on HTTP status >= 400 (naming URL and
    status), network failure, too many redirects, or a transport-policy refusal (decided
    before connecting); ``ValueError`` on a malformed ``sha256``.
    """
    expected = _parse_expected(sha256)
    if expected is not None:
        hit = cache.verified(expected)
        if hit is not None:
            return Fetched(path=hit, sha256=expected, url=url, fetched_from=hit.resolve().as_uri(),
                           from_cache=True, size=hit.stat().st_size)

    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchError(f"refusing to fetch {url}: only http and https URLs")
    source = mirror.rewrite(url) if mirror is not None else url
    insecure_ok = mirror is not None and mirror.allow_insecure
    check_redirect_hop(source, insecure_ok=insecure_ok, previous=None, requested=url)

    if progress is None:
        progress = sys.stderr.isatty()
    own_client = client is None
    if client is None:
        client = download_client()
    try:
        return _download(url, source, expected, cache, client, progress, insecure_ok)
    finally:
        if own_client:
            client.close()


@contextmanager
def _follow(url: str, source: str, client: httpx.Client, insecure_ok: bool):
    """The final response of ``GET source`` (a context manager; streamed, closed on exit),
    following at most :data:`MAX_REDIRECTS` redirects one hop at a time, each hop checked by
    :func:`check_redirect_hop` before it is requested; a redirect's body is never read.
    Raises ``FetchError`` for HTTP status >= 400, too many redirects, a refused hop or a
    network failure (naming the URL; ``url`` is the one the caller asked for)."""
    import httpx

    headers = {"Accept-Encoding": "identity"}
    current, previous = source, None
    try:
        for _ in range(MAX_REDIRECTS + 1):
            check_redirect_hop(current, insecure_ok=insecure_ok, previous=previous, requested=url)
            request = client.build_request("GET", current, headers=headers)
            response = client.send(request, stream=True, follow_redirects=False)
            try:
                if response.has_redirect_location and response.next_request is not None:
                    previous, current = current, str(response.next_request.url)
                    continue
                if response.status_code >= 300:
                    raise FetchError(f"GET {current} failed: HTTP {response.status_code} "
                                     f"{response.reason_phrase}" + (f" (for {url})" if current != url else ""))
                yield current, response
                return
            finally:
                response.close()
        raise FetchError(f"GET {source} failed: more than {MAX_REDIRECTS} redirects (for {url})")
    except httpx.HTTPError as exc:
        raise FetchError(f"GET {current} failed: {type(exc).__name__}: {exc}") from exc


def _download(url: str, source: str, expected: str | None, cache: ArtifactCache,
              client: httpx.Client, progress: bool, insecure_ok: bool) -> Fetched:
    """Stream ``source`` into a cache temp file, following checked redirects."""
    with _follow(url, source, client, insecure_ok) as (current, response):
        return _store(url, current, expected, cache, response, progress)


def get_bytes(url: str, *, max_bytes: int, client: httpx.Client | None = None) -> bytes:
    """The body of ``GET url`` (http or https), read whole but never more than ``max_bytes``:
    for small documents that are verified by their reader, not by a pinned digest (a
    catalogue index, its signature and entries). The same transport policy and redirect
    handling as :func:`fetch` (:func:`check_redirect_hop` on every hop; a redirect's body is
    never taken for the document). ``client``: an ``httpx.Client`` to use (not closed).
    Raises ``FetchError`` naming the URL for status >= 300 after redirects, a body over
    ``max_bytes``, a refused hop or a network failure."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchError(f"refusing to fetch {url}: only http and https URLs")
    check_redirect_hop(url, insecure_ok=False, previous=None, requested=url)
    import httpx

    own = client is None
    if client is None:
        client = download_client()
    try:
        with _follow(url, url, client, False) as (current, response):
            chunks, size = [], 0
            try:
                for chunk in response.iter_raw(CHUNK_SIZE):
                    size += len(chunk)
                    if size > max_bytes:
                        raise FetchError(f"GET {current} failed: larger than {max_bytes} bytes")
                    chunks.append(chunk)
            except httpx.HTTPError as exc:
                raise FetchError(f"GET {current} failed: {type(exc).__name__}: {exc}") from exc
            return b"".join(chunks)
    finally:
        if own:
            client.close()


def _read_timeout(response: httpx.Response) -> float | None:
    """The read timeout ``response`` was asked with (the client's: :data:`READ_TIMEOUT` for
    :func:`download_client`), for :func:`lemonpack.httpclient.body`'s socket reads."""
    try:
        timeout = response.request.extensions.get("timeout")
    except RuntimeError:  # an answer made without a request (a test's)
        timeout = None
    read = timeout.get("read", READ_TIMEOUT) if isinstance(timeout, dict) else READ_TIMEOUT
    return read if read is None or isinstance(read, (int, float)) else READ_TIMEOUT


def _store(url: str, current: str, expected: str | None, cache: ArtifactCache,
           response: httpx.Response, progress: bool) -> Fetched:
    """Write the response body to the cache, hashing as it streams (through
    :func:`lemonpack.httpclient.body`, raw: a large body of known length read from the socket
    into one reused 1 MiB buffer, the hashing and the write on the :class:`Hasher`'s thread);
    verify; commit."""
    from lemonpack.httpclient import body

    fh, tmp = cache.staging()
    sink = Hasher(fh, threaded=True)  # hashes and writes while the next bytes are read from the socket
    try:
        total = response.headers.get("Content-Length")
        with byte_meter(int(total) if total and total.isdigit() else None, url.rsplit("/", 1)[-1] or url,
                        progress) as on_bytes:
            for chunk in body(response, _read_timeout(response), raw=True):
                sink.write(chunk)  # a piece is valid until the next is read: the Hasher copies it to its thread
                if on_bytes is not None:
                    on_bytes(len(chunk))
        actual = sink.digest().hex
        if expected is not None and actual != expected:
            raise IntegrityError(url, sha256_text(expected), sha256_text(actual))
    except BaseException:
        sink.close()
        cache.discard(fh, tmp)
        raise
    path = cache.commit(fh, tmp, actual)
    return Fetched(path=path, sha256=actual, url=url, fetched_from=current, from_cache=False, size=sink.size)


__all__ = ["CHUNK_SIZE", "CONNECT_TIMEOUT", "Fetched", "ProgressLines", "READ_TIMEOUT", "byte_meter", "download_client",
           "fetch", "get_bytes"]
