"""Re-scanning discovery (lemonpack/runtime/recipes/watch.py): the watcher picks up an added,
edited and deleted recipe, polls every two seconds by default, survives a failing callback."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lemonpack.runtime.recipes.discovery import Discovery, SearchDir
from lemonpack.runtime.recipes.watch import DiscoveryWatcher

from support.helpers import wait_for
from support.recipes import recipe_doc, write_recipe


def test_watcher_picks_up_add_edit_and_delete(tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    os.chmod(d, 0o755)
    seen: list = []
    lock = threading.Lock()

    def on_change(result):
        with lock:
            seen.append(result)

    def atomic_write(doc) -> Path:
        # Editors and package managers replace files; a scan must never see a half-written one here.
        tmp = write_recipe(d / ".a.json.tmp", doc)  # dot files are ignored by discovery
        os.replace(tmp, d / "a.json")
        return d / "a.json"

    watcher = DiscoveryWatcher(Discovery([SearchDir(d, "user")]), interval=0.05, on_change=on_change)
    with watcher:
        assert watcher.running and watcher.current().recipes == {}
        p = atomic_write(recipe_doc("aaa"))
        assert wait_for(lambda: "aaa" in watcher.current().recipes)
        atomic_write(recipe_doc("aaa", display_name="edited"))
        assert wait_for(lambda: watcher.current().recipes["aaa"].recipe.display_name == "edited")
        gen = watcher.generation
        p.unlink()
        assert watcher.wait_for_change(gen, 5.0)
        assert watcher.current().recipes == {}
    assert not watcher.running
    with lock:
        assert [sorted(r.recipes) for r in seen] == [["aaa"], ["aaa"], []]


def test_watcher_default_interval_is_two_seconds(tmp_path):
    w = DiscoveryWatcher(Discovery([SearchDir(tmp_path, "user")]))
    assert w.interval == 2.0 and not w.running


def test_watcher_survives_a_failing_callback(tmp_path, caplog):
    d = tmp_path / "b"
    d.mkdir()
    os.chmod(d, 0o755)

    def boom(result):
        raise RuntimeError("callback bug")

    with DiscoveryWatcher(Discovery([SearchDir(d, "user")]), interval=0.05, on_change=boom) as w:
        write_recipe(d / "a.json", recipe_doc("aaa"))
        assert wait_for(lambda: "aaa" in w.current().recipes)
        write_recipe(d / "b.json", recipe_doc("bbb"))
        assert wait_for(lambda: "bbb" in w.current().recipes)
        assert w.running
