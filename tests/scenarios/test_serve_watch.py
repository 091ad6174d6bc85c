"""``lemonpack serve`` picks up discovery and registry changes without a restart."""

from __future__ import annotations


import httpx

from support.recipes import recipe_doc, write_recipe
from support.helpers import wait_for

CHAT = {"messages": [{"role": "user", "content": "hi"}]}




def test_recipe_added_and_removed_while_running(live):
    lv = live(idle_check=0.05)
    lv.add("user.first", recipe_doc("first", fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        ids = lambda: [m["id"] for m in c.get("/v1/models").json()["data"]]  # noqa: E731
        recipes = lambda: [r["recipe"] for r in c.get("/v1/system-info").json()["recipes"]]  # noqa: E731
        assert ids() == ["user.first"]
        r = c.post("/v1/chat/completions", json={"model": "user.second", **CHAT})
        assert r.status_code == 404 and r.json()["error"]["type"] == "model_not_found"

        lv.add("user.second", recipe_doc("second", fake_engine=[]))  # a new recipe file and a new registration
        assert wait_for(lambda: "second" in recipes()), "the watcher picks up the new recipe"
        assert ids() == ["user.first", "user.second"]
        m = {d["id"]: d for d in c.get("/v1/models").json()["data"]}["user.second"]
        assert m["recipe"] == "second" and m["state"] == "unloaded"
        assert c.post("/v1/chat/completions", json={"model": "user.second", **CHAT}).status_code == 200
        eng = lv.server.runner.engine("user.second")
        assert eng.poll() is None

        (lv.backends / "second.json").unlink()  # the recipe goes away: its engine is unloaded
        assert wait_for(lambda: "second" not in recipes())
        assert wait_for(lambda: eng.poll() is not None), "a removed recipe's engine is stopped"
        m = {d["id"]: d for d in c.get("/v1/models").json()["data"]}["user.second"]
        assert m["state"] == "failed" and "not discovered" in m["reason"]
        r = c.post("/v1/chat/completions", json={"model": "user.second", **CHAT})
        assert r.status_code == 404 and "not discovered" in r.json()["error"]["message"]

        # an unregistered model disappears, and its engine with it
        assert c.post("/v1/chat/completions", json={"model": "user.first", **CHAT}).status_code == 200
        first = lv.server.runner.engine("user.first")
        lv.registry.remove("user.first")
        assert wait_for(lambda: first.poll() is not None)
        assert "user.first" not in ids()

        # put the recipe back: served again without a restart
        write_recipe(lv.backends / "second.json", recipe_doc("second", fake_engine=[]))
        assert wait_for(lambda: "second" in recipes())
        assert c.post("/v1/chat/completions", json={"model": "user.second", **CHAT}).status_code == 200
