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


# The trust check the runner makes (``trust``: a Trust of --policy/--registries.d), and what it
# records for the status page. A ``reject`` scope and an accepting one with a pinned image are
# decided without asking any registry (lemonpack.trust.check.Trust.check).

DIGEST = "sha256:" + "ab" * 32


def _trust(tmp_path):
    import json

    from lemonpack.trust.check import Trust

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                                  "transports": {"docker": {"r.example/bad": [{"type": "reject"}]}}}))
    (tmp_path / "rd").mkdir()
    return Trust.load(policy, tmp_path / "rd"), policy


def _plan(image: str):
    from lemonpack.runtime.launch.plan import LaunchPlan

    return LaunchPlan(recipe="r", model="m", executable="/usr/bin/podman",
                      argv=("/usr/bin/podman", "run", "--rm", image, "--port", "8080"))


def test_the_runner_judges_with_its_trust_and_records_each_verdict(tmp_path):
    trust, policy = _trust(tmp_path)
    plans = {"good": _plan(f"r.example/good/x@{DIGEST}"), "bad": _plan(f"r.example/bad/x@{DIGEST}"),
             "local": _plan("localhost/lemonpack/x:1")}
    r = Runner(plans, engines=object(), trust=trust)
    assert r.trust_status("bad") is None  # nothing checked yet
    why = r.trust_refusal("bad")
    assert why and f"rejected by the trust policy {policy} " in why and 'scope transports.docker["r.example/bad"]' in why
    bad = r.trust_status("bad")
    assert bad is not None and bad["allowed"] is False and bad["scope"] == 'transports.docker["r.example/bad"]'
    assert bad["reason"] and bad["policy"] == str(policy) and bad["reference"] == f"r.example/bad/x@{DIGEST}"
    assert r.trust_refusal("good") is None
    assert r.trust_status("good") == {"allowed": True, "scope": "default", "reason": None, "policy": str(policy),
                                      "reference": f"r.example/good/x@{DIGEST}"}
    assert r.trust_refusal("local") is None and r.trust_status("local") is None  # no registry image: no check


def test_a_rejected_checkpoint_is_the_verdict_the_status_page_shows(tmp_path):
    """Judged ahead (``judged_references``: no plan, no pull), a model's ``oci://`` checkpoint is
    judged before its engine images, and its verdict is what trust_status keeps: a model refused
    for its weights shows why, not a blank verdict."""
    from lemonpack.runtime.lifecycle.runner import ModelReferences

    trust, policy = _trust(tmp_path)
    refs = {"m": ModelReferences("m", "r", images=(f"r.example/good/x@{DIGEST}",),
                                 checkpoints={"main": f"oci://r.example/bad/weights@{DIGEST}"}),
            "ok": ModelReferences("ok", "r", images=(f"r.example/good/x@{DIGEST}",),
                                  checkpoints={"main": f"oci://r.example/good/weights@{DIGEST}"})}
    r = Runner(lambda name: _plan("unused"), engines=object(), trust=trust, judged_references=refs.__getitem__)
    why = r.trust_refusal("m")
    assert why and "model 'm' checkpoint 'main'" in why
    status = r.trust_status("m")
    assert status is not None and status["allowed"] is False
    assert status["reference"] == f"r.example/bad/weights@{DIGEST}" and status["policy"] == str(policy)
    assert r.trust_refusal("ok") is None
    assert r.trust_status("ok") == {"allowed": True, "scope": "default", "reason": None, "policy": str(policy),
                                    "reference": f"r.example/good/x@{DIGEST}"}
