"""lemonpack.sourcedate: the one SOURCE_DATE_EPOCH reader (reproducible-builds.org), used by
builds and releases (default 0) and the catalogue (default: the last commit's time)."""

from __future__ import annotations

import pytest

from lemonpack.errors import ConfigError
from lemonpack.sourcedate import from_environ, source_date_epoch


@pytest.mark.parametrize("env, expected", [
    ({}, None), ({"SOURCE_DATE_EPOCH": ""}, None), ({"SOURCE_DATE_EPOCH": "  "}, None),
    ({"SOURCE_DATE_EPOCH": "0"}, 0), ({"SOURCE_DATE_EPOCH": "1700000000"}, 1_700_000_000),
    ({"SOURCE_DATE_EPOCH": " 42\n"}, 42), ({"SOURCE_DATE_EPOCH": "007"}, 7),
])
def test_from_environ(env, expected):
    assert from_environ(env) == expected
    assert source_date_epoch(env) == (0 if expected is None else expected)


@pytest.mark.parametrize("raw", ["-1", "1.5", "1e9", "yesterday", "0x10", "+5", "²", "\u0663"])
def test_a_bad_value_is_a_config_error_naming_the_variable(raw):
    """Not a non-negative ASCII integer: refused (the spec's "SHOULD exit with a non-zero error
    code"), never read as 0; ``²`` and the Arabic-Indic three are digits to ``str.isdigit``."""
    for read in (from_environ, source_date_epoch):
        with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH must be a non-negative integer") as info:
            read({"SOURCE_DATE_EPOCH": raw})
        assert repr(raw) in str(info.value)


def test_the_process_environment_is_the_default(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "123")
    assert from_environ() == source_date_epoch() == 123
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert from_environ() is None and source_date_epoch() == 0


def test_catalogue_and_build_read_the_same_rule(tmp_path):
    from lemonpack.catalogue.dates import source_epoch

    assert source_epoch(tmp_path, {"SOURCE_DATE_EPOCH": "9"}) == 9
    with pytest.raises(ConfigError):
        source_epoch(tmp_path, {"SOURCE_DATE_EPOCH": "²"})
