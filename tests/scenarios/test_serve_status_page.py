"""The status page of ``lemonpack serve`` in headless Chromium (issue 27, point 8): a screenshot per
state (idle, loading, serving, failed) into the artifacts directory (``test-artifacts/serve-status``
under scripts/test.sh), load and unload clicked and seen in ``/v1/models``, an engine event appearing
live in the log, the chat playground answering, a hostile model name shown as text, and no
request leaving 127.0.0.1 (every request the page made, from DevTools' network log).

Chromium is Debian's, driven by selenium through the system chromedriver (``support.browser``,
the catalogue site's tests' helper): non-loopback hosts go to a closed proxy port and resolve
nothing, and the network log is the record of every request the page made.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from support.browser import artifacts_dir, chromium
from support.helpers import wait_for as _wait_for


def wait_for(predicate, timeout):
    """support.helpers.wait_for, an element the page re-rendered while it was read counting as
    "not yet" (selenium's StaleElementReferenceException: the page redraws its rows live)."""
    from selenium.common.exceptions import StaleElementReferenceException

    def fresh():
        try:
            return predicate()
        except StaleElementReferenceException:
            return False
    return _wait_for(fresh, timeout)
from support.recipes import recipe_doc, write_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


def _rows(driver) -> dict[str, str]:
    """model name (as text) -> state shown, from the page's table."""
    return driver.execute_script(
        "return Object.fromEntries(Array.from(document.querySelectorAll('#model-rows tr[data-model]'))"
        ".map(tr => [tr.querySelector('td.name').textContent, tr.dataset.state]));")


def _click(driver, model: str, action: str) -> None:
    driver.execute_script(
        "const b = Array.from(document.querySelectorAll('#model-rows button'))"
        ".find(b => b.dataset.model === arguments[0] && b.dataset.action === arguments[1]); b.click();",
        model, action)


def _state(c: httpx.Client, model: str) -> str:
    return next(m["state"] for m in c.get("/v1/models").json()["data"] if m["id"] == model)


def _log(driver) -> list[str]:
    return driver.execute_script("return Array.from(document.querySelectorAll('#log li')).map(li => li.textContent);")


def test_the_status_page_in_chromium(live, tmp_path, tmp_path_factory):
    shots = artifacts_dir("serve-status", tmp_path_factory.mktemp("artifacts"))
    gate = tmp_path / "gate"
    lv = live(memory_budget=1 << 30)
    lv.add("user.ok", recipe_doc("ok", fake_engine=[]))
    lv.add("user.slow", recipe_doc("slow", fake_engine=["--health-gate", str(gate)]))
    lv.add("user.stream", recipe_doc("stream", fake_engine=["--chunks", "400", "--chunk-delay", "0.05"]))
    lv.add("user.bad", recipe_doc("bad", fake_engine=["--exit-now", "--exit-code", "4"]))
    hostile_dir = tmp_path / "models"
    hostile_dir.mkdir()
    hostile = hostile_dir / f"{HOSTILE}.gguf"
    hostile.write_bytes(b"GGUF")
    doc = recipe_doc("by-path", fake_engine=[])
    doc["extensions"] = {"dev.lemonpack.serves": ["*.gguf"]}
    write_recipe(lv.backends / "by-path.json", doc)
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c, \
            chromium(offline=False, loopback=True, performance_log=True) as driver:
        driver.get(lv.url + "/")
        assert wait_for(lambda: set(_rows(driver)) == {"user.ok", "user.slow", "user.stream", "user.bad"}, 20)
        assert set(_rows(driver).values()) == {"unloaded"}
        assert wait_for(lambda: driver.find_element("id", "s-conn").text == "live", 10)
        driver.save_screenshot(str(shots / "idle.png"))

        # load clicked: the engine event appears live in the log, /v1/models says ready
        before = len(_log(driver))
        _click(driver, "user.ok", "load")
        assert wait_for(lambda: _state(c, "user.ok") == "ready", 30)
        assert wait_for(lambda: any("user.ok: ready: engine ready (pid" in line for line in _log(driver)[before:]), 10)
        assert wait_for(lambda: _rows(driver)["user.ok"] == "ready", 10)
        pid = lv.server.runner.engine("user.ok").pid
        assert wait_for(lambda: f"pid {pid}" in driver.find_element("css selector", "tr[data-model='user.ok']").text, 5)

        # loading: an engine whose health check does not pass yet
        _click(driver, "user.slow", "load")
        assert wait_for(lambda: _rows(driver).get("user.slow") == "loading", 20)
        driver.save_screenshot(str(shots / "loading.png"))
        gate.write_text("go")
        assert wait_for(lambda: _rows(driver).get("user.slow") == "ready", 30)

        # serving: a stream in flight, counted on the page
        done = threading.Event()

        def stream() -> None:
            with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as s:
                with s.stream("POST", "/v1/chat/completions", json={
                        "model": "user.stream", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
                    for _ in r.iter_raw():
                        pass
            done.set()
        threading.Thread(target=stream, daemon=True).start()
        row = "tr[data-model='user.stream'] td:nth-child(9)"
        assert wait_for(lambda: _rows(driver).get("user.stream") == "ready"
                        and driver.find_element("css selector", row).text == "1", 30)
        driver.save_screenshot(str(shots / "serving.png"))

        # failed: an engine that exits at start, its reason shown
        _click(driver, "user.bad", "load")
        assert wait_for(lambda: _rows(driver).get("user.bad") == "failed", 30)
        assert "code 4" in driver.find_element("css selector", "tr[data-model='user.bad']").text
        driver.save_screenshot(str(shots / "failed.png"))

        # the chat playground
        driver.execute_script("document.getElementById('chat-model').value = 'user.ok';")
        driver.find_element("id", "chat-send").click()
        assert wait_for(lambda: driver.find_element("id", "chat-output").text.strip() != "", 20)
        assert not driver.find_element("id", "chat-output").text.startswith("HTTP")

        # unload clicked: /v1/models says unloaded
        _click(driver, "user.ok", "unload")
        assert wait_for(lambda: _state(c, "user.ok") == "unloaded", 30)
        assert wait_for(lambda: _rows(driver)["user.ok"] == "unloaded", 10)

        # a hostile model name (a model file named by path) is text, never markup
        r = c.post("/v1/chat/completions", json={"model": str(hostile), "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 200, r.text
        real = str(hostile.resolve())
        assert wait_for(lambda: _rows(driver).get(real) == "ready", 20)
        assert wait_for(lambda: any(real in line for line in _log(driver)), 10)  # its events too, as text
        assert driver.title == "lemonpack serve"
        assert driver.find_elements("css selector", "img") == []
        assert driver.execute_script("return document.querySelectorAll('#model-rows tr[data-model] td.name img')"
                                     ".length") == 0
        driver.save_screenshot(str(shots / "hostile-name.png"))
        assert done.wait(60)

        # every request the page made went to this server on 127.0.0.1
        urls = set()
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                urls.add(msg["params"]["request"]["url"])
        assert urls and all(u.startswith(lv.url + "/") for u in urls), sorted(urls)
        assert {lv.url + p for p in ("/", "/status/app.js", "/status/app.css", "/v1/status", "/v1/events",
                                     "/v1/load", "/v1/unload", "/v1/chat/completions")} <= urls
        problems = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"
                    and "Failed to load resource" not in e["message"]]  # the 500 of user.bad's load, expected
        assert not problems, problems  # no CSP violation, no script error

        # the CSP holds: an inline script put into the page does not run
        driver.execute_script("const s = document.createElement('script'); s.textContent = "
                              "\"document.title = 'inline ran'\"; document.body.appendChild(s);")
        assert driver.title == "lemonpack serve"
        assert wait_for(lambda: any("Content Security Policy" in e["message"] for e in driver.get_log("browser")), 5)
    for name in ("idle", "loading", "serving", "failed"):
        assert Path(shots / f"{name}.png").stat().st_size > 10_000
