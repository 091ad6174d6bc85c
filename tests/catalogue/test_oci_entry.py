"""A community recipe published to a real registry (docker-registry on 127.0.0.1) by digest:
pulled and verified through the registry client, its cosign signature checked with the
publisher's key, and the published digest reproduced by the builder."""

from __future__ import annotations

import json
import secrets

import pytest

from lemonpack.registry import RegistryClient, parse_reference
from lemonpack.registry.transfer import publish_layout
from lemonpack.signing.remote import sign_image
from tests.catalogue.test_build import by_id, run
from tests.support.catalogue import STRIX, CatalogueWorld, fingerprint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_oci_entry_signed_and_reproduced(registry, tmp_path):
    world = CatalogueWorld(tmp_path, community=False)
    try:
        world.publisher("acme", world.keys["acme"])
        world.put("https://example.invalid/acme/strix-cpu.tar.gz", b"strix cpu artifact")
        world.put("https://example.invalid/acme/strix-rocm.tar.gz", b"strix rocm artifact")
        name = f"cat-oci-{secrets.token_hex(3)}"
        doc = dict(STRIX, recipe=name)
        recipe_file = tmp_path / f"{name}.json"
        recipe_file.write_text(json.dumps(doc, indent=2))
        r = run(world, "build", str(recipe_file), "--out", str(tmp_path / "layout"), "--mirror", world.mirror,
                "--no-progress", "--json")
        assert r.returncode == 0, r.stderr
        built_digest = json.loads(r.stdout)["indexes"][name]
        repo = f"catalogue/{name}"
        with RegistryClient(registry.host) as client:
            res = publish_layout(tmp_path / "layout", parse_reference(f"{registry.host}/{repo}:v1"), client, tag=name)
        ref = f"{registry.host}/{repo}@{res.pushed[0].digest}"
        assert res.pushed[0].digest == built_digest
        sign_image(ref, world.keys["acme"])
        # a second image, unsigned, published under a digest the builder does not reproduce
        world.entry("acme", name, f'kind = "recipe"\nname = "{name}"\nlicense = "MIT"\ndescription = "oci"\n'
                    f'[source]\ntype = "oci"\nref = "{ref}"\n')
        out = tmp_path / "out"
        r = run(world, "catalogue", "build", "--out", str(out), "--source", str(world.source), "--mirror",
                world.mirror, "--key", str(world.index_key))
        assert r.returncode == 0, r.stderr
        index = json.loads((out / "catalogue.json").read_bytes())
        assert index["rejected"] == []
        e = by_id(index)[f"recipe:{name}"]
        assert e["digest"] == built_digest and e["source"] == {"type": "oci", "ref": ref}
        assert e["signature"] == {"status": "verified", "fingerprint": fingerprint(world.keys["acme"])}
        assert e["reproducible"] == {"status": "reproduced", "published": built_digest, "rebuilt": built_digest}
        assert e["commands"]["install"] == f"lemonpack install oci://{ref}"
    finally:
        world.stop()
