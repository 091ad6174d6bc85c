"""The discovery watcher out of file descriptors (issue 27, point 5; case 81): a scan that meets
``EMFILE`` is "cannot look now" (:class:`CannotLook`, the last result kept, one log line),
never "every recipe is gone"."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.server.conftest import fake_doc
from tests.support.helpers import write_descriptor

ROOT = Path(__file__).resolve().parents[3]


def test_a_scan_out_of_descriptors_keeps_the_last_result(tmp_path):
    """In a child process (its limits are its own): discovery finds the recipe; then every
    descriptor under a lowered soft limit is taken and the watcher's refresh raises
    CannotLook with the recipe still published; with descriptors back it scans as before."""
    write_descriptor(tmp_path, "fake-engine.json", fake_doc())
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
