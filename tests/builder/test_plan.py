"""builder.plan: the one build plan that ``build``, ``publish RECIPE.json`` and the
catalogue's rebuild share; ``build --dry-run``; usage errors (exit 2) from one place."""

from __future__ import annotations

import json

import pytest

from lemonpack.builder.plan import plan_build
from lemonpack.errors import FetchError, MirrorSettingError, UsageError
from lemonpack.fetch import Mirror
from lemonpack.oci.platform import host_arch

from support.buildkit import LEMONADE

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

PER_PLATFORM = LEMONADE / "llamacpp_per_platform.json"


def test_defaults_are_the_hosts_and_the_environments(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("LEMONPACK_MIRROR", "http://127.0.0.1:1/m/")
    plan = plan_build([PER_PLATFORM], out=tmp_path / "out")
    assert (plan.cpu_arch, plan.compression, plan.epoch) == (host_arch(), "gzip", 1700000000)
    assert plan.mirror == Mirror("http://127.0.0.1:1/m")
    assert (plan.os, plan.accelerator, plan.arch, plan.base, plan.bases) == (None, None, None, None, {})
    doc = plan.to_json()
    assert doc["recipes"][0]["recipe"] == "llamacpp-per-platform"
    tags = [t["tag"] for t in doc["recipes"][0]["targets"]]
    assert "llamacpp-per-platform.linux-rocm" in tags and len(tags) == len(set(tags)) > 1


@pytest.mark.parametrize("kw, param", [
    ({"os": "plan9"}, "--os"), ({"accelerator": "abacus"}, "--accelerator"), ({"cpu_arch": "x86_64"}, "--cpu-arch"),
    ({"compression": "lz4"}, "--compression"), ({"arch": "gfx9999"}, "--arch"),
])
def test_bad_choices_are_usage_errors_naming_the_option(tmp_path, kw, param):
    with pytest.raises(UsageError) as e:
        plan_build([PER_PLATFORM], out=tmp_path / "out", **kw)
    assert e.value.exit_code == 2 and e.value.param == param and str(e.value).startswith(param)


def test_a_bad_mirror_is_the_same_usage_error_from_fetch_and_from_the_plan(tmp_path):
    with pytest.raises(MirrorSettingError) as direct:
        Mirror("ftp://m/x")
    assert isinstance(direct.value, FetchError) and direct.value.exit_code == 2
    with pytest.raises(MirrorSettingError):
        plan_build([PER_PLATFORM], out=tmp_path / "out", mirror="ftp://m/x")


@pytest.mark.parametrize("command", [
    ["build", str(PER_PLATFORM), "--out", "OUT"],
    ["install", str(LEMONADE / "llamacpp_rocm_nightly.json"), "--yes"],
    ["publish", str(PER_PLATFORM), "--to", "127.0.0.1:1/x"],
])
def test_a_bad_mirror_exits_2_from_every_command(lp, tmp_path, command):
    args = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    r = lp(*args, "--mirror", "ftp://no-such-mirror.invalid")
    assert r.code == 2 and "mirror must be an http(s) URL" in r.err and "Traceback" not in r.err, r
    assert "--mirror: " in r.err and "ftp://no-such-mirror.invalid" in r.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mirror", ["ftp://x", "http://127.0.0.1:1/m"])
def test_example_with_a_mirror_names_the_mirror_option_its_value_and_the_schemes(lp, tmp_path, mirror):
    r = lp("build", "--example", "--mirror", mirror, "--out", tmp_path / "out")
    assert r.code == 2 and "Traceback" not in r.err, r
    assert f"--mirror: {mirror!r} cannot be used with --example" in r.err and "http:// or https://" in r.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["build", "--example", "--out", "OUT", "--no-progress"], ["install", "--example", "--yes"]])
def test_a_bad_mirror_from_the_environment_exits_2_from_the_example_too(lp, tmp_path, monkeypatch, command):
    # the example never uses a mirror, but a non-URL $LEMONPACK_MIRROR is the same exit 2 as for recipes
    monkeypatch.setenv("LEMONPACK_MIRROR", "notaurl")
    r = lp(*[a.replace("OUT", str(tmp_path / "out")) for a in command])
    assert r.code == 2 and "$LEMONPACK_MIRROR: mirror must be an http(s) URL" in r.err and "'notaurl'" in r.err, r
    assert not (tmp_path / "out").exists()


def test_a_bad_mirror_from_the_environment_is_named_so(tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_MIRROR", "ftp://m/x")
    with pytest.raises(MirrorSettingError) as e:
        plan_build([PER_PLATFORM], out=tmp_path / "out")
    assert e.value.param == "$LEMONPACK_MIRROR" and "'ftp://m/x'" in str(e.value)


def test_dry_run_prints_the_plan_and_builds_nothing(lp, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "7")
    out = tmp_path / "out"
    r = lp("build", PER_PLATFORM, "--out", out, "--dry-run", "--json", "--compression", "zstd")
    assert r.code == 0 and not out.exists(), r
    doc = json.loads(r.out)
    assert doc == plan_build([PER_PLATFORM], out=out, compression="zstd").to_json()
    assert doc["epoch"] == 7 and doc["compression"] == "zstd" and doc["cpu_arch"] == host_arch()
    assert doc["compressor"].startswith("libzstd ") and doc["compressor"].endswith(", level 3")
    text = lp("build", PER_PLATFORM, "--out", out, "--dry-run")
    assert text.code == 0 and "llamacpp-per-platform.linux-rocm: linux/rocm" in text.out and not out.exists()
    # what the layers' bytes depend on besides the inputs: the deflater, its version and level
    from zlib_ng import zlib_ng

    assert f"compressor: zlib-ng {zlib_ng.ZLIBNG_VERSION}, level 2" in text.out
