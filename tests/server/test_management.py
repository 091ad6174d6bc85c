"""``lemonpack serve``: management routes, discovery pick-up, the CLI's listen address."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from lemonpack.errors import UsageError
from lemonpack.server.main import parse_listen
from support.recipes import recipe_doc, write_recipe


def test_models_load_unload_health_system_info(live):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    write_recipe(lv.backends / "broken.json", '{"recipe": "broken"}')
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert c.get("/v1/health").json()["status"] == "ok"
        m = c.get("/v1/models").json()["data"]
        assert m == [{"id": "user.fake", "object": "model", "owned_by": "lemonpack", "recipe": "fake-engine",
                      "capabilities": ["chat_completion"], "state": "unloaded", "reason": None, "remote": False}]
        assert c.post("/v1/load", json={"model_name": "user.fake"}).json()["state"] == "ready"
        assert c.get("/api/v1/models").json()["data"][0]["state"] == "ready"
        eng = lv.server.runner.engine("user.fake")
        assert c.post("/v1/unload", json={"model_name": "user.fake"}).status_code == 200
        assert eng.poll() is not None  # the engine is gone
        info = c.get("/v1/system-info").json()
        assert info["recipes"][0]["recipe"] == "fake-engine" and info["recipes"][0]["is_external"] is True
        assert info["recipes"][0]["display_name"] == "Recipe fake-engine"
        assert info["recipes"][0]["platforms"] == {"linux": ["cpu"]}
        assert any(r["file"].endswith("broken.json") and r["reason"] for r in info["rejected"])


@pytest.mark.parametrize("text,want", [("8000", ("127.0.0.1", 8000)), (":8001", ("127.0.0.1", 8001)),
                                       ("0.0.0.0:8002", ("0.0.0.0", 8002)), ("[::1]:8003", ("::1", 8003))])
def test_port_forms(text, want):
    assert parse_listen(text, "127.0.0.1") == want


@pytest.mark.parametrize("bad", ["abc", "0", "70000", "host:"])
def test_bad_ports_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_listen(bad, "127.0.0.1")


def test_taken_port_is_refused_exit_2(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "serve", "--port", f":{port}"],
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "LEMONPACK_CONFIG_DIR": str(tmp_path / "c"),
                                "LEMONPACK_CACHE_DIR": str(tmp_path / "k"), "HOME": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    assert "already in use" in r.stderr and "Traceback" not in r.stderr


def test_a_registered_model_is_resolved_once_until_the_registry_or_discovery_changes(live, monkeypatch):
    monkeypatch.delenv("LEMONPACK_BACKEND", raising=False)
    lv = live()
    lv.add("user.a", recipe_doc("alpha", fake_engine=[]))
    lv.start()
    cat = lv.server.catalog
    first = cat.get("user.a")
    assert cat.get("user.a") is first  # the hot path: the same answer, not resolved again
    lv.add("user.b", recipe_doc("beta", fake_engine=[]))  # the registry file is replaced
    again = cat.get("user.a")
    assert again is not first and again == first
    write_recipe(lv.backends / "alpha.json", recipe_doc("alpha", display_name="Alpha two", fake_engine=[]))
    cat.watcher.refresh()
    assert cat.get("user.a").recipe.display_name == "Alpha two"
    lv.registry.remove("user.a")
    with pytest.raises(Exception, match="not registered"):
        cat.get("user.a")
    monkeypatch.setenv("LEMONPACK_BACKEND", "beta")  # an override: resolved (and selected) every time
    with pytest.raises(Exception, match="LEMONPACK_BACKEND=beta"):
        cat.get("user.b")


def test_the_trust_check_before_admission_lists_references_without_building_a_plan(tmp_path):
    """serve's 403 check (``Runner.trust_refusal`` over ``Catalog.judged_references``): the engine
    image of a podman recipe and the model's ``oci://`` checkpoint are judged from the block and
    the registry entry, no launch plan built (no port, no weights). An ``oci://`` model's plan
    cannot even be built before its pull, so a rejected engine image of one used to pass."""
    import json

    from lemonpack.runtime.lifecycle.runner import ModelReferences, Runner
    from lemonpack.runtime.models.registry import ModelRegistry
    from lemonpack.runtime.recipes.discovery import Discovery, SearchDir
    from lemonpack.runtime.recipes.watch import DiscoveryWatcher
    from lemonpack.server.catalog import Catalog
    from lemonpack.trust.check import Trust

    digest = "sha256:" + "ab" * 32
    backends = tmp_path / "backends"
    for rid, image in (("bad-image", f"r.example/bad/engine@{digest}"), ("good-image", f"r.example/good/engine@{digest}")):
        write_recipe(backends / f"{rid}.json", recipe_doc(rid, command="podman",
                                                          args=("run", "--rm", image, "--port", "{port}")))
    registry = ModelRegistry(tmp_path / "user_models.json")
    registry.add("user.oci", "bad-image", {"main": f"oci://r.example/good/model@{digest}"})
    registry.add("user.denied", "good-image", {"main": f"oci://r.example/bad/model@{digest}"})
    registry.add("user.fine", "good-image", {"main": f"oci://r.example/good/model@{digest}"})
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}],
                                  "transports": {"docker": {"r.example/bad": [{"type": "reject"}]}}}))
    (tmp_path / "rd").mkdir()
    catalog = Catalog(registry, DiscoveryWatcher(Discovery([SearchDir(backends, "user")]), interval=0.2),
                      model_files=False)

    def no_plan(model: str):
        raise AssertionError(f"a launch plan of {model} was built for the trust check")

    assert catalog.judged_references("user.oci") == ModelReferences(
        "user.oci", "bad-image", (f"r.example/bad/engine@{digest}",), {"main": f"oci://r.example/good/model@{digest}"})
    runner = Runner(no_plan, engines=object(), trust=Trust.load(policy, tmp_path / "rd"),
                    judged_references=catalog.judged_references)
    why = runner.trust_refusal("user.oci")
    assert why and why.startswith("bad-image: engine image: r.example/bad/engine@") and "reject" in why, why
    status = runner.trust_status("user.oci")
    assert status is not None and status["allowed"] is False
    why = runner.trust_refusal("user.denied")
    assert why and why.startswith("model 'user.denied' checkpoint 'main': r.example/bad/model@"), why
    assert runner.trust_refusal("user.fine") is None
    assert runner.trust_status("user.fine") == {"allowed": True, "scope": "default", "reason": None,
                                                "policy": str(policy), "reference": f"r.example/good/engine@{digest}"}
