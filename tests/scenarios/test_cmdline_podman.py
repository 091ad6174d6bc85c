"""The reader against the real thing: what ``read_container_argv`` says the image (and the
container name) of an argv is, is what ``podman create`` records for the same argv.

slow: real podman (CONTAINERS_CONF from tests/containers.conf), local images only.

How the argvs are generated (deterministic: ``random.Random(SEED)``, ``COUNT`` argvs):
each argv is ``[wrapper part] + [podman] + [global options] + [subcommand form] + [flags] +
["--"]? + [IMAGE] + [command part]``, where

- the wrapper part is 0-2 nested exec-style wrappers drawn from :data:`WRAPPERS_POOL`
  (nice, setsid, env, timeout, stdbuf, ionice, taskset, prlimit, chrt, nohup with their options);
- podman is ``podman`` or ``/usr/bin/podman``; global options are drawn from
  :data:`GLOBALS_POOL` (``--log-level error`` / ``--log-level=error`` / ``--noout``);
- the subcommand is ``create`` or ``container create``;
- 1-6 flags are drawn from :data:`FLAGS_POOL`: booleans written bare (``--tls-verify``,
  ``--rm``, ``--privileged``, ``-i``) and with ``=value``, value flags in ``--f v``, ``--f=v`` and
  ``-fv`` spellings, short clusters (``-it``, ``-itw /tmp``, ``-ieA=1``), and value flags whose
  value is the OTHER image's reference (``--label <decoy>``), plus ``--name`` (always, with a
  unique name, as ``--name x`` or ``--name=x``);
- IMAGE is one of two local images with distinct contents and names, the other one is the decoy:
  it appears as a flag value and/or in the command part (``[decoy]``, ``["--rm", decoy]``), so a
  reader that takes a boolean's next token as its value, or stops too early or too late, names
  the wrong image and the test fails.

The wrapper part is dropped when podman is called (podman gets the same args directly); the
reader reads the full argv. For every argv: reader image == ``{{.ImageName}}``, reader name ==
``{{.Name}}``, and the labels ``with_labels`` inserted are the container's labels. Created
containers and both images are removed afterwards.

Every image an argv names (``ContainerInvocation.images``): for ``--mount`` values in each
spelling the reader accepts (``source=``/``src=``, ``--mount=``, type not first, CSV quoting, two
mounts, non-image mounts) the reader's mount images are the mounts ``podman create`` records as
``Type: image``; for ``podman pull`` with several images (flags between them, ``--``) the images
the reader names are the ones podman pulls (from ``docker-archive:`` files of the two images).
"""

from __future__ import annotations

import io
import random
import secrets
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.containers import BUSYBOX

from lemonpack.oci.cmdline import read_container_argv

pytestmark = pytest.mark.slow

SEED = 20261130
COUNT = 60

WRAPPERS_POOL = [
    ["nice", "-n", "5"], ["nice", "-10"], ["setsid", "-f"], ["setsid"], ["env", "A=1", "B=2"],
    ["env", "-u", "X"], ["env", "-i", "PATH=/usr/bin"], ["timeout", "30"], ["timeout", "-k", "5", "30s"],
    ["stdbuf", "-oL"], ["ionice", "-c", "3"], ["taskset", "0x1"], ["prlimit", "--nofile=1024"],
    ["chrt", "-o", "0"], ["nohup"],
]
GLOBALS_POOL = [["--log-level", "error"], ["--log-level=error"], ["--noout"]]


def flags_pool(decoy: str) -> list[list[str]]:
    return [
        ["--rm"], ["--rm=false"], ["--tls-verify"], ["--tls-verify=false"], ["--privileged"], ["--init"],
        ["--read-only"], ["--no-hosts"], ["--read-only-tmpfs=false"], ["-i"], ["-t"], ["-it"], ["-q"],
        ["--env-host"], ["--http-proxy=false"],
        ["-e", "A=1"], ["--env=B=2"], ["-eC=3"], ["-w", "/tmp"], ["--workdir=/www"], ["-w/tmp"],
        ["--hostname", "h1"], ["-h", "h2"], ["--user", "0"], ["-u0"], ["--stop-signal", "TERM"],
        ["-itw", "/tmp"], ["-ieA=1"], ["-p8080:80"], ["-p", "8081:81"], ["--label", decoy], ["-l", decoy],
        ["--label=k=v"], ["--annotation", "a=b"], ["--pull", "never"], ["--pull=never"],
        ["--log-level", "error"],  # podman's persistent global option, after the subcommand
    ]


def command_pool(decoy: str) -> list[list[str]]:
    return [[], ["sh"], [decoy], ["--rm", decoy], ["-it", "x"], ["--name", "not-the-name"]]


def generate(images: tuple[str, str], prefix: str) -> list[tuple[list[str], list[str]]]:
    """``COUNT`` pairs ``(full argv, podman argv)`` (see the module docstring)."""
    rng = random.Random(SEED)
    out = []
    for k in range(COUNT):
        image, decoy = images if rng.random() < 0.5 else images[::-1]
        wrappers = [w for _ in range(rng.choice([0, 0, 1, 1, 2])) for w in rng.choice(WRAPPERS_POOL)]
        engine = rng.choice(["podman", "/usr/bin/podman"])
        globals_ = [g for _ in range(rng.choice([0, 1, 1])) for g in rng.choice(GLOBALS_POOL)]
        sub = rng.choice([["create"], ["container", "create"]])
        name = f"{prefix}-{k}"
        flags = [rng.choice([["--name", name], [f"--name={name}"]])]
        for _ in range(rng.randint(1, 6)):
            flags.insert(rng.randint(0, len(flags)), rng.choice(flags_pool(decoy)))
        flat = [x for f in flags for x in f]
        dash = ["--"] if rng.random() < 0.2 else []
        tail = rng.choice(command_pool(decoy))
        podman_argv = [engine, *globals_, *sub, *flat, *dash, image, *tail]
        out.append((wrappers + podman_argv, podman_argv))
    return out


def _image_tar(directory: Path, marker: str) -> Path:
    path = directory / (marker.replace(":", "-") + ".tar")
    bb = BUSYBOX.read_bytes()
    with tarfile.open(path, "w") as tf:
        for d in ("bin", "tmp", "www"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(ti)
        ti = tarfile.TarInfo("bin/busybox")
        ti.size, ti.mode = len(bb), 0o755
        tf.addfile(ti, io.BytesIO(bb))
        sh = tarfile.TarInfo("bin/sh")
        sh.type, sh.linkname = tarfile.SYMTYPE, "busybox"
        tf.addfile(sh)
        data = marker.encode()
        ti = tarfile.TarInfo("www/marker")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def podman_images(podman_conf):
    d, env = podman_conf["dir"], podman_conf["env"]
    suffix = secrets.token_hex(4)
    images = (f"localhost/lp-argv-a-{suffix}:t1", f"localhost/lp-argv-b-{suffix}:t2")
    for ref in images:
        subprocess.run(["podman", "import", "--change", 'CMD ["/bin/sh"]', str(_image_tar(d, ref.rsplit("/", 1)[1])), ref], env=env, check=True,
                       capture_output=True, timeout=180)
    created: list[str] = []
    try:
        yield {"env": env, "images": images, "prefix": f"lp-argv-{suffix}", "created": created}
    finally:
        for name in created:
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=env, capture_output=True, timeout=120)
        subprocess.run(["podman", "rmi", "-f", *images], env=env, capture_output=True, timeout=120)


def test_generator_is_deterministic_and_mixes_the_forms():
    a = generate(("i1", "i2"), "p")
    assert a == generate(("i1", "i2"), "p") and len(a) == COUNT
    joined = [" ".join(full) for full, _ in a]
    assert sum(full[0] != podman[0] for full, podman in a) >= 10  # wrapped
    for needle in ("--tls-verify ", " -it", "=false", "--name=", " -- ", "container create", "--log-level"):
        assert any(needle in j for j in joined), needle


def test_reader_agrees_with_podman_create(podman_images):
    env, images = podman_images["env"], podman_images["images"]
    disagreements = []
    for full, direct in generate(images, podman_images["prefix"]):
        inv = read_container_argv(full)
        assert inv is not None and inv.subcommand == "create", full
        podman_images["created"].append(inv.name)
        # the reader's labels go into the argv podman runs: they must land as labels
        offset = len(full) - len(direct)
        labelled = inv.with_labels(full, {"lp.argv": "yes"})[offset:]
        r = subprocess.run(list(labelled), env=env, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, (direct, r.stderr)
        got = subprocess.run(["podman", "inspect", "--format", "{{.ImageName}}|{{.Name}}|{{index .Config.Labels \"lp.argv\"}}",
                              inv.name], env=env, capture_output=True, text=True, timeout=60).stdout.strip()
        if got != f"{inv.image}|{inv.name}|yes":
            disagreements.append((full, got, inv.image, inv.name))
    assert disagreements == []


# --- every image an argv names (ContainerInvocation.images): --mount type=image, multi-image pull

def mount_argvs(image: str, other: str, prefix: str) -> list[list[str]]:
    """``podman create`` argvs whose ``--mount`` values name ``other`` (or nothing) in every
    spelling the reader accepts; ``image`` is the positional one. Names are ``<prefix>-m<k>``."""
    forms = [
        ["--mount", f"type=image,source={other},destination=/m"],
        [f"--mount=type=image,src={other},dst=/m"],
        ["--mount", f"destination=/m,source={other},type=image"],  # type not first
        ["--mount", f"type=image,source={other},target=/m,rw=true"],
        ["--mount", f'"type=image","source={other}",target=/m'],  # CSV quoting
        ["--tls-verify", "--mount", f"type=image,source={other},destination=/m", "--label", other],
        ["--mount", f"type=image,source={other},destination=/m", "--mount", f"type=image,source={image},destination=/n"],
        ["--mount", "type=bind,source=/tmp,destination=/m"],  # not an image
        ["--mount", "type=tmpfs,destination=/m", "-v", "/tmp:/v"],
    ]
    return [["podman", "create", "--name", f"{prefix}-m{k}", *form, image] for k, form in enumerate(forms)]


def test_mount_images_agree_with_podman_create(podman_images):
    """The reader's ``--mount`` images are the mounts podman records as ``Type: image``, and the
    positional image is still the container's image."""
    import json
    env, (a, b) = podman_images["env"], podman_images["images"]
    disagreements = []
    for argv in mount_argvs(a, b, podman_images["prefix"]):
        inv = read_container_argv(argv)
        podman_images["created"].append(inv.name)
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, (argv, r.stderr)
        got = subprocess.run(["podman", "inspect", "--format", "{{.ImageName}}|{{json .Mounts}}", inv.name], env=env,
                             capture_output=True, text=True, timeout=60).stdout.strip()
        image_name, _, mounts = got.partition("|")
        podman_mounted = sorted(m["Source"] for m in json.loads(mounts) if m["Type"] == "image")
        reader_mounted = sorted(text for index, text in inv.images if index != inv.image_index)
        if (image_name, podman_mounted) != (inv.image, reader_mounted):
            disagreements.append((argv, image_name, podman_mounted, inv.image, reader_mounted))
    assert disagreements == []
    assert any(len(inv.images) == 3 for inv in map(read_container_argv, mount_argvs(a, b, "p")))


def test_multi_image_pull_agrees_with_podman_pull(podman_images, tmp_path):
    """``podman pull`` stores every positional (flags may come between them): the images the
    reader names are the ones podman pulls (local archives: no registry needed)."""
    env, images = podman_images["env"], podman_images["images"]
    refs, ids = [], []
    for k, ref in enumerate(images):
        archive = tmp_path / f"{k}.tar"
        subprocess.run(["podman", "save", "-o", str(archive), ref], env=env, check=True, capture_output=True, timeout=120)
        refs.append(f"docker-archive:{archive}")
        ids.append(subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], env=env, check=True,
                                  capture_output=True, text=True, timeout=60).stdout.strip())
    for argv in (["podman", "pull", "-q", refs[0], refs[1]], ["podman", "pull", refs[0], "-q", "--tls-verify=false", refs[1]],
                 ["podman", "pull", "-q", "--", refs[1]]):
        inv = read_container_argv(argv)
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, (argv, r.stderr)
        pulled = r.stdout.split()
        expected = [ids[refs.index(text)] for _, text in inv.images]
        assert pulled == expected, (argv, r.stdout, inv.images)
