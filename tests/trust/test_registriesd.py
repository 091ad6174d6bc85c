"""containers-registries.d(5) as containers/image reads it (docker/registries_d.go):
``use-sigstore-attachments`` from the most specific scope that sets it, then default-docker;
files merged, a scope in two files refused; stricter: an unknown key refuses the file."""

from __future__ import annotations

import pytest

from lemonpack.errors import PolicyFileError
from lemonpack.oci.reference import parse_registry_reference
from lemonpack.trust.registriesd import load_registries_dir
from lemonpack.trust.requirements import policy_reference


def ref(text: str):
    return policy_reference(parse_registry_reference(text))


def test_the_most_specific_setting_decides(tmp_path):
    (tmp_path / "a.yaml").write_text("default-docker:\n  use-sigstore-attachments: true\n")
    (tmp_path / "b.yaml").write_text("docker:\n  r.example/ns:\n    use-sigstore-attachments: false\n"
                                     "  r.example/ns/app:\n    lookaside: https://sigs.example\n"
                                     "  '*.example':\n    use-sigstore-attachments: true\n")
    (tmp_path / "ignored.yml").write_text("not: [read")
    rd = load_registries_dir(tmp_path)
    on, why = rd.attachments(ref("r.example/ns/app:v1"))  # app sets no value: ns decides
    assert not on and "docker 'r.example/ns'" in why and "b.yaml" in why
    assert rd.attachments(ref("r.example/other:v1"))[0] is True  # *.example
    assert rd.attachments(ref("q.other/x:v1")) == (True, f"use-sigstore-attachments: true in default-docker of "
                                                         f"{tmp_path / 'a.yaml'}")


def test_no_directory_is_no_setting(tmp_path):
    on, why = load_registries_dir(tmp_path / "none").attachments(ref("r.example/app:v1"))
    assert not on and "no use-sigstore-attachments setting" in why


@pytest.mark.parametrize("files, message", [
    ({"a.yaml": "docker:\n  r.example:\n    use-sigstore-attachment: true\n"}, "use-sigstore-attachment: unknown key"),
    ({"a.yaml": "docker:\n  r.example:\n    use-sigstore-attachments: 'yes'\n"}, "expected true or false"),
    ({"a.yaml": "default-docker: {}\n", "b.yaml": "default-docker: {}\n"}, '"default-docker" defined both'),
    ({"a.yaml": "docker:\n  r.example: {}\n", "b.yaml": "docker:\n  r.example: {}\n"}, "defined both"),
    ({"a.yaml": "docker: [1]\n"}, "expected a mapping of namespaces"),
    ({"a.yaml": "docker: {x: [\n"}, "not valid YAML"),
])
def test_a_malformed_file_is_refused_naming_it(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(PolicyFileError, match=message.replace("(", r"\(")):
        load_registries_dir(tmp_path)
