"""An image built by lemonpack runs under podman (slow: real skopeo + podman + runc).

Storage is private to the test (``--root``/``--runroot`` in the tmp dir, vfs driver), so
no other user of this machine's podman sees the image, and it is removed afterwards.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support.tools import CONTAINERS_CONF

from lemonpack.oci import MEDIA_TYPE_LAYER_TAR_GZIP, LayoutWriter, verify_layout, write_dir_layer

BUSYBOX = Path("/bin/busybox")
EXPECTED = "hello from lemonpack"


@pytest.mark.slow
def test_busybox_image_runs_in_podman(tmp_path, require_tool):
    require_tool("skopeo")
    require_tool("podman")
    require_tool("busybox")
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(BUSYBOX, src / "busybox")
    (src / "busybox").chmod(0o755)
    layout = tmp_path / "layout"
    with LayoutWriter(layout) as lw:
        layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                                 lambda f: write_dir_layer(src, "opt/lemonpack/bb", f, mtime=0))
        image = lw.add_image_manifest(
            {"architecture": "amd64", "os": "linux",
             "config": {"Entrypoint": ["/opt/lemonpack/bb/busybox"], "Cmd": ["echo", EXPECTED]}},
            [layer], created=0)
        lw.set_tags({"busybox": image})
    verify_layout(layout)

    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    root = tmp_path / "storage"
    runroot = Path(tempfile.mkdtemp(prefix="lp-run-"))  # podman: runroot <= 50 chars
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    store = f"[vfs@{root}+{runroot}]"
    podman = ["podman", "--root", str(root), "--runroot", str(runroot), "--storage-driver", "vfs"]
    ref = "localhost/lemonpack-test:busybox"

    def run(argv):
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)

    try:
        copied = run(["skopeo", "copy", f"oci:{layout}:busybox", f"containers-storage:{store}{ref}"])
        assert copied.returncode == 0, copied.stderr
        ran = run([*podman, "run", "--rm", "--network", "none", ref])
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == EXPECTED
        digest = run([*podman, "image", "inspect", "--format", "{{.Digest}}", ref])
        assert digest.stdout.strip() == image.digest
    finally:
        run([*podman, "rmi", "-f", ref])
        shutil.rmtree(runroot, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
