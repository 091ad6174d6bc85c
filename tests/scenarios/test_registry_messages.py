"""Messages a new user meets: a broken --registry-config names the file, line and column;
`load` of an image index names the per-platform tags to load instead; `load` of a path
that holds no layout says so."""

from __future__ import annotations

from support.registry import layout_tags, lemonpack


def test_a_broken_registry_config_names_file_line_and_column(registry, tmp_path):
    cfg = tmp_path / "auth.json"
    cfg.write_text('{\n  "auths": {\n    "h": {"auth": "x"},\n  }\n}\n')  # trailing comma: line 4, column 3
    r = lemonpack("pull", f"{registry.host}/messages/x:v1", "-o", str(tmp_path / "o"),
                  "--registry-config", str(cfg), check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"error: {cfg}: line 4 column 3: registry credentials file is not valid JSON: "
                                "Expecting property name enclosed in double quotes")


def test_load_of_an_index_names_its_per_platform_tags(example_layout):
    tags = layout_tags(example_layout)
    index_tag = next(t for t in tags if "." not in t)
    per_platform = sorted(t for t in tags if t.startswith(index_tag + "."))
    assert per_platform
    r = lemonpack("load", f"{example_layout}:{index_tag}", check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"error: {example_layout}:{index_tag} is an image index; load one of its "
                                f"per-platform tags: {', '.join(per_platform)}")


def test_load_of_a_path_without_a_layout(tmp_path):
    r = lemonpack("load", f"{tmp_path}/nonexist:tag", check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == f"error: no OCI image layout at {tmp_path}/nonexist (no such directory)"
    r = lemonpack("load", f"{tmp_path}:tag", check=False)
    assert r.stderr.strip() == f"error: no OCI image layout at {tmp_path} (no oci-layout file in it)"
