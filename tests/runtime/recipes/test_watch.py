"""Re-scanning discovery (lemonpack/runtime/recipes/watch.py): the watcher picks up an added,
edited and deleted recipe, polls every two seconds by default, survives a failing callback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
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


# --- The discovery watcher out of file descriptors (issue 27, point 5; case 81): a scan that meets
# ``EMFILE`` is "cannot look now" (:class:`CannotLook`, the last result kept, one log line), never
# "every recipe is gone".


ROOT = Path(__file__).resolve().parents[3]


def test_a_scan_out_of_descriptors_keeps_the_last_result(tmp_path):
    """In a child process (its limits are its own): discovery finds the recipe; then every
    descriptor under a lowered soft limit is taken and the watcher's refresh raises
    CannotLook with the recipe still published; with descriptors back it scans as before."""
    write_recipe(tmp_path / "fake-engine.json", recipe_doc(fake_engine=[]))
    code = textwrap.dedent(f"""
        import os, resource, sys
        from lemonpack.runtime.recipes.discovery import CannotLook, Discovery, SearchDir
        from lemonpack.runtime.recipes.watch import DiscoveryWatcher
        from pathlib import Path
        w = DiscoveryWatcher(Discovery([SearchDir(Path({str(tmp_path)!r}), "user")]), interval=60)
        assert "fake-engine" in w.current().recipes, w.current()
        w.discovery._cache.clear()  # make the next scan read the file again
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        try:
            w.refresh()
            print("no CannotLook")
        except CannotLook as e:
            print("CannotLook:", e)
        print("kept:", "fake-engine" in w.current().recipes, w.generation)
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        print("after:", "fake-engine" in w.refresh().recipes, w.generation)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("CannotLook: cannot list") and "Too many open files" in out[0], out
    assert out[1:] == ["kept: True 0", "after: True 0"], out
