"""containers-registries.conf(5) as lemonpack reads it (lemonpack/registry/registries_conf.py):
which files, in which order, prefixes, insecure, blocked, location and mirrors (pull only)."""

from __future__ import annotations

import pytest

from lemonpack.errors import ConfigError
from lemonpack.registry import registries_conf as rc


def _env(tmp_path, main: str | None = None) -> dict[str, str]:
    env = {"HOME": str(tmp_path / "home")}
    if main is not None:
        p = tmp_path / "main.conf"
        p.write_text(main)
        env["CONTAINERS_REGISTRIES_CONF"] = str(p)
    return env


def test_v2_entries_prefixes_and_mirrors(tmp_path):
    conf = rc.load(_env(tmp_path, '''
unqualified-search-registries = ["docker.io"]
[[registry]]
location = "127.0.0.1:5000"
insecure = true
[[registry]]
prefix = "example.com/team"
location = "internal.example:8443/mirror/team"
[[registry.mirror]]
location = "cache.example/team"
insecure = true
[[registry.mirror]]
location = "digests.example/team"
pull-from-mirror = "digest-only"
[[registry]]
prefix = "*.blocked.example"
blocked = true
'''), home=tmp_path / "home")
    assert conf.insecure("127.0.0.1:5000") and not conf.insecure("127.0.0.1:5001")
    assert not conf.insecure("example.com")
    tag = conf.pull_sources("example.com", "team/app", by_digest=False)
    assert [(s.host, s.repository, s.insecure, s.mirror) for s in tag] == [
        ("cache.example", "team/app", True, True),
        ("internal.example:8443", "mirror/team/app", False, False)]
    digest = conf.pull_sources("example.com", "team/app", by_digest=True)
    assert [s.host for s in digest] == ["cache.example", "digests.example", "internal.example:8443"]
    assert conf.pull_sources("example.com", "teamx/app", by_digest=False)[0].host == "example.com"  # not a prefix
    with pytest.raises(ConfigError, match="blocked"):
        conf.pull_sources("a.blocked.example", "x", by_digest=False)


def test_files_order_user_file_replaces_system_and_drop_ins_override(tmp_path):
    home = tmp_path / "home"
    user = home / ".config" / "containers"
    (user / "registries.conf.d").mkdir(parents=True)
    (user / "registries.conf").write_text('[[registry]]\nlocation = "a.example"\ninsecure = true\n')
    (user / "registries.conf.d" / "10-off.conf").write_text('[[registry]]\nlocation = "a.example"\ninsecure = false\n')
    (user / "registries.conf.d" / "20-b.conf").write_text('[registries.insecure]\nregistries = ["b.example"]\n')
    (user / "registries.conf.d" / "ignored.txt").write_text("not toml [")
    conf = rc.load({"HOME": str(home)}, home=home)
    assert conf.files == [user / "registries.conf", user / "registries.conf.d" / "10-off.conf",
                          user / "registries.conf.d" / "20-b.conf"]
    assert not conf.insecure("a.example")  # the later drop-in's entry replaced it
    assert conf.insecure("b.example")  # version 1's [registries.insecure]


@pytest.mark.parametrize("text, message", [
    ("[[registry]\n", "not valid TOML"),
    ('[[registry]]\ninsecure = "yes"\nlocation = "x"\n', "insecure must be true or false"),
    ('[[registry]]\nlocation = "x"\n[[registry.mirror]]\npull-from-mirror = "all"\n', "needs a location"),
    ('[[registry]]\nlocation = "x"\n[[registry.mirror]]\nlocation = "m"\npull-from-mirror = "some"\n',
     "pull-from-mirror"),
])
def test_a_malformed_file_is_one_error_naming_it(tmp_path, text, message):
    env = _env(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as e:
        rc.load(env, home=tmp_path / "home")
    assert env["CONTAINERS_REGISTRIES_CONF"] in str(e.value)


def test_prefix_matching_follows_containers_image(tmp_path):
    conf = rc.load(_env(tmp_path, '[[registry]]\nprefix = "r.example/ns"\nlocation = "r.example/ns"\ninsecure = true\n'),
                   home=tmp_path / "home")
    assert conf.insecure("r.example", "ns/app") and conf.insecure("r.example", "ns")
    assert not conf.insecure("r.example", "nsx/app") and not conf.insecure("r.example")


def test_registries_the_command_line_says_insecure_join_what_the_files_say(tmp_path):
    main = '''
[[registry]]
location = "reg.example:5000"
[[registry.mirror]]
location = "mirror.example/reg"
'''
    try:
        rc.insecure_on_command_line(["127.0.0.1:5000", "reg.example:5000"])
        conf = rc.load(_env(tmp_path, main))
        assert conf.insecure("127.0.0.1:5000") and conf.insecure("reg.example:5000", "x/y")
        assert not conf.insecure("127.0.0.1:5001")
        entry = conf.find("reg.example:5000/x")
        assert entry is not None and [m.location for m in entry.mirrors] == ["mirror.example/reg"]  # kept
        assert [s.insecure for s in conf.pull_sources("reg.example:5000", "x", by_digest=False)] == [False, True]
    finally:
        rc.insecure_on_command_line([])
    assert not rc.load(_env(tmp_path, main)).insecure("127.0.0.1:5000")


def test_insecure_registry_pairs_are_taken_from_the_command_line_and_the_bare_flag_stays():
    from lemonpack.errors import UsageError

    try:
        args = ["pull", "--insecure", "127.0.0.1:5000", "--insecure=reg.example", "127.0.0.1:5000/a:v1", "--out", "o"]
        assert rc.take_insecure_registries(args) == ["pull", "127.0.0.1:5000/a:v1", "--out", "o"]
        assert rc._COMMAND_LINE_INSECURE == ["127.0.0.1:5000", "reg.example"]
        bare = ["pull", "--insecure", "127.0.0.1:5000/a:v1", "--out", "o"]  # a reference is no registry host
        assert rc.take_insecure_registries(bare) == bare
        for flag in (["publish", "--insecure", "layout:v1"], ["publish", "x", "--insecure"], ["x", "--", "--insecure", "h.example"]):
            assert rc.take_insecure_registries(flag) == flag
        with pytest.raises(UsageError, match="--insecure=a/b: give a registry"):
            rc.take_insecure_registries(["pull", "--insecure=a/b"])
    finally:
        rc.insecure_on_command_line([])
