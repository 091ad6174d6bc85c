"""Runner: a waiter that is gone (cancelled, timed out) never stops the others being answered."""

from __future__ import annotations

from concurrent.futures import Future

from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.lifecycle.runner import Runner, _Live


def _runner() -> Runner:
    r = Runner({}, engines=object())  # effects called directly: nothing is spawned
    r._live["m"] = _Live(1, engine="ENGINE")
    return r


def test_ready_skips_a_cancelled_waiter_and_answers_the_rest():
    r = _runner()
    gone, a, b = Future(), Future(), Future()
    gone.cancel()
    r.ready("m", 1, (a, gone, b))
    assert a.result(0) == "ENGINE" and b.result(0) == "ENGINE"


def test_failed_skips_an_answered_waiter_and_answers_the_rest():
    r = _runner()
    done, a = Future(), Future()
    done.set_result("earlier")
    r.failed("m", (done, a), RuntimeFailure("boom"))
    assert isinstance(a.exception(0), RuntimeFailure) and done.result(0) == "earlier"
