"""The answer rewriting of :mod:`lemonpack.server.rewrite` at every split of its input: the
chunked decoder and the ``model`` member of JSON answers and event streams."""

from __future__ import annotations

import json

import pytest

from lemonpack.server.framing import Dechunker
from lemonpack.server.rewrite import MAX_JSON_ANSWER, ModelRewriter

NAME = 'user.a\\b"c'  # a name that needs JSON escaping


def _feed(obj, data: bytes, step: int) -> bytes:
    return b"".join(obj.feed(data[i:i + step]) for i in range(0, len(data), step))


@pytest.mark.parametrize("step", [1, 2, 5, 64, 1 << 16])
def test_dechunker_at_every_split(step):
    raw = b"5;ext=1\r\nhello\r\n3\nabc\n10\r\n" + b"x" * 16 + b"\r\n0\r\nTrailer: t\r\n\r\n"
    d = Dechunker()
    assert _feed(d, raw, step) == b"helloabc" + b"x" * 16 and d.done


def test_dechunker_refuses_a_bad_size_line():
    with pytest.raises(ValueError):
        Dechunker().feed(b"zz\r\nhello\r\n")


@pytest.mark.parametrize("step", [1, 3, 40, 1 << 16])
def test_event_stream_model_rewritten_line_by_line(step):
    events = [{"id": 1, "model": "/models/x.gguf", "choices": [{"delta": {"content": '"model": "no"'}}]},
              {"model": "/models/x.gguf", "nested": {"model": "keep"}}, {"choices": []}]
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b": comment \"model\"\n\ndata: [DONE]\n\n"
    r = ModelRewriter(NAME, "text/event-stream; charset=utf-8")
    out = _feed(r, raw, step) + r.end()
    docs = [json.loads(ln[6:]) for ln in out.split(b"\n") if ln.startswith(b"data: {")]
    assert [d.get("model") for d in docs] == [NAME, NAME, None]
    assert docs[0]["choices"][0]["delta"]["content"] == '"model": "no"'  # text inside a string untouched
    assert docs[1]["nested"] == {"model": "keep"}
    assert out.endswith(b": comment \"model\"\n\ndata: [DONE]\n\n")


def test_event_stream_is_not_held_back():
    r = ModelRewriter(NAME, "text/event-stream")
    assert r.feed(b'data: {"model": "x"}\n') != b""  # a whole line goes out at once
    assert r.feed(b'data: {"mod') == b""  # a partial line waits for its end


def test_json_answer_rewritten_whole_and_others_untouched():
    r = ModelRewriter(NAME, "application/json")
    assert r.feed(b'{"model": "/p", "x": [1.5, ') == b""
    assert json.loads(r.feed(b'"\\u00e9"]}') + r.end()) == {"model": NAME, "x": [1.5, "é"]}
    r = ModelRewriter(NAME, "application/json")
    assert r.feed(b"[1, 2]") + r.end() == b"[1, 2]"  # not an object: as it was
    r = ModelRewriter(NAME, "audio/wav")
    assert not r.active and r.feed(b'{"model": "x"}') == b'{"model": "x"}'


def test_a_huge_json_answer_passes_unchanged():
    r = ModelRewriter(NAME, "application/json")
    body = b'{"model": "/p", "data": "' + b"x" * MAX_JSON_ANSWER + b'"}'
    assert _feed(r, body, 1 << 20) + r.end() == body


def test_an_engines_own_member_is_learnt_and_replaced_as_bytes_others_still_rewritten():
    from lemonpack.server.rewrite import ModelRewriter

    r = ModelRewriter("user.x", "text/event-stream")
    ev = b'data: {"model":"/m/x.gguf","choices":[{"delta":{"content":"tok"}}]}\n\n'
    assert r.feed(ev * 3) == ev.replace(b'"/m/x.gguf"', b'"user.x"') * 3
    assert r._literal == b'"model":"/m/x.gguf"'  # learnt from the first block
    other = b'data: {"model" : "other", "x": 1}\n\n'  # another spelling: the expression still applies
    half = len(ev) // 2
    out = r.feed(ev[:half]) + r.feed(ev[half:] + other) + r.end()
    assert out == ev.replace(b'"/m/x.gguf"', b'"user.x"') + b'data: {"model":"user.x", "x": 1}\n\n'
    plain = b'data: {"choices":[]}\n\n'
    assert r.feed(plain) == plain


def test_dechunker_ends_after_the_trailers_and_counts_bytes_after_the_end():
    d = Dechunker()
    assert d.feed(b"3\r\nabc\r\n0\r\n") == b"abc" and not d.done  # the empty line is still due
    assert d.feed(b"T: 1\r\n") == b"" and not d.done
    assert d.feed(b"\r\n") == b"" and d.done and d.extra == 0
    d = Dechunker()
    d.feed(b"1\r\nx\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert d.done and d.extra == len(b"HTTP/1.1 200 OK\r\n")
