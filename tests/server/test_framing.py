"""Chunked framing (:mod:`lemonpack.server.framing`): the walker at every split of a body,
a decoder taking over from a walker wherever it stopped, the halves of a needle."""

from __future__ import annotations

import random

import pytest

from lemonpack.server.framing import ChunkWalker, Dechunker, FramingError, halves


def _body() -> tuple[bytes, bytes]:
    """A chunked body (frames of many sizes, an extension, trailers) and its data."""
    rng = random.Random(7)
    parts = [bytes([97 + i % 26]) * rng.randint(1, 40) for i in range(30)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"5;ext=1\r\nhello\r\n0\r\nT: 1\r\n\r\n"
    return framed, b"".join(parts) + b"hello"


def test_the_walker_finds_the_end_at_every_split_in_three():
    body, _ = _body()
    for a in range(0, len(body) + 1, 3):
        for b in range(a, min(len(body), a + 45) + 1):
            w, used = ChunkWalker(), 0
            for piece in (body[:a], body[a:b], body[b:]):
                if piece and not w.done:
                    used += w.feed(piece)
            assert w.done and used == len(body), (a, b)


def test_the_walker_says_where_a_body_ends_and_refuses_a_bad_size_line():
    w = ChunkWalker()
    assert w.feed(b"3\r\nabc\r\n0\r\n\r\nJUNK") == len(b"3\r\nabc\r\n0\r\n\r\n") and w.done
    with pytest.raises(FramingError, match="chunk-size"):
        ChunkWalker().feed(b"3\r\nabc\r\nzz\r\n")


def test_a_decoder_resumes_wherever_the_walker_stopped():
    body, data = _body()
    for cut in range(len(body)):
        w = ChunkWalker()
        w.feed(body[:cut])
        if w.done:
            continue
        before = Dechunker().feed(body[:cut])  # what a decoder from the start gave up to the cut
        d = Dechunker.resume(w.skip, w.line, w.trailers)
        assert before + d.feed(body[cut:]) == data and d.done and not d.extra, cut


def test_one_cut_of_a_needle_leaves_one_of_its_halves_whole():
    needle = b'"model"'
    head, tail = halves(needle)
    assert (head, tail) == (b'"mod', b'del"')
    for i in range(1, len(needle)):
        a, b = needle[:i], needle[i:]
        assert head in a or tail in b, i
