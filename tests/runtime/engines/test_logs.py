"""The per-engine log ring: bounds, order, subscribers, pumping a real pipe."""

from __future__ import annotations

import os

from lemonpack.runtime.engines.logs import LogRing


def test_bounded_by_lines_and_bytes():
    r = LogRing(max_lines=3, max_bytes=1000)
    for i in range(10):
        r.append(f"l{i}")
    assert r.lines() == ["l7", "l8", "l9"] and r.dropped == 7
    r = LogRing(max_lines=100, max_bytes=10)
    for i in range(5):
        r.append("abcd")
    assert r.lines() == ["abcd", "abcd"]
    r = LogRing(max_line_bytes=4)
    r.append("abcdefgh")
    assert r.lines() == ["abcd…"]
    assert r.tail(0) == [] and r.tail(5) == ["abcd…"]


def test_subscribers_get_lines_and_can_leave():
    r = LogRing()
    r.append("old")
    got = []
    cancel = r.subscribe(got.append, replay=True)
    r.append("new")
    cancel()
    r.append("after")
    assert got == ["old", "new"]
    r.subscribe(lambda line: 1 / 0)  # a broken subscriber does not break the ring
    r.append("still")
    assert r.tail(1) == ["still"]


def test_pump_reads_a_pipe_until_eof():
    rd, wr = os.pipe()
    r = LogRing()
    t = r.pump(os.fdopen(rd, "rb"))
    os.write(wr, b"one\r\ntwo\n\xff bad utf8\nno newline")
    os.close(wr)
    t.join(5)
    assert r.closed.is_set()
    assert r.lines() == ["one", "two", "\ufffd bad utf8", "no newline"]


def test_a_broken_subscriber_is_logged_and_does_not_stop_the_others(caplog):
    import logging

    r = LogRing()
    got = []

    def broken(line):
        raise BrokenPipeError("stderr went away")
    r.subscribe(broken)
    r.subscribe(got.append)
    with caplog.at_level(logging.WARNING, logger="lemonpack.runtime.engines.logs"):
        r.append("one")
        r.append("two")
    assert got == ["one", "two"] and r.lines() == ["one", "two"]
    assert r.subscriber_errors == 2
    errors = [rec for rec in caplog.records if rec.name == "lemonpack.runtime.engines.logs"]
    assert len(errors) == 1 and "stderr went away" in str(errors[0].exc_info[1])  # logged once, with the cause
