"""A community recipe published to a real registry (docker-registry on 127.0.0.1) by digest:
pulled and verified through the registry client, its cosign signature checked with the
publisher's key, and the published digest reproduced by the builder."""

from __future__ import annotations

import http.server
import json
import secrets
import threading
import urllib.error
import urllib.request

import pytest

from lemonpack.oci.reference import parse_registry_reference

from lemonpack.registry import RegistryClient
from lemonpack.registry.transfer import publish_layout
from lemonpack.signing.remote import sign_image
from support.catalogue import CatalogueWorld, STRIX, S_CPU, S_ROCM, by_id, fingerprint, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_oci_entry_signed_and_reproduced(registry, tmp_path):
    world = CatalogueWorld(tmp_path, community=False)
    try:
        world.publisher("acme", world.keys["acme"])
        world.put("https://example.invalid/acme/strix-cpu.tar.gz", S_CPU)
        world.put("https://example.invalid/acme/strix-rocm.tar.gz", S_ROCM)
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
            res = publish_layout(tmp_path / "layout", parse_registry_reference(f"{registry.host}/{repo}:v1"), client, tag=name)
        ref = f"{registry.host}/{repo}@{res.pushed[0].digest}"
        assert res.pushed[0].digest == built_digest
        sign_image(ref, world.keys["acme"])
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
        # case 23: the same registry failing (HTTP 503) on the signature lookup only: the entry
        # says the signature is unavailable, not that the image is unsigned
        with SigFailingProxy(registry.url) as proxy:
            proxied = ref.replace(registry.host, proxy.host)
            world.entry("acme", name, f'kind = "recipe"\nname = "{name}"\nlicense = "MIT"\ndescription = "oci"\n'
                        f'[source]\ntype = "oci"\nref = "{proxied}"\n')
            out2 = tmp_path / "out-503"
            r = run(world, "catalogue", "build", "--out", str(out2), "--source", str(world.source), "--mirror",
                    world.mirror)
            assert r.returncode == 0, r.stderr
            e = by_id(json.loads((out2 / "catalogue.json").read_bytes()))[f"recipe:{name}"]
            assert e["signature"] == {"status": "unavailable", "fingerprint": None,
                                      "detail": "signature unavailable (HTTP 503)"}
            shown = run(world, "catalogue", "show", name, "--index", str(out2)).stdout
            assert "signature: signature unavailable (HTTP 503)" in shown
            assert any(".sig" in p for p in proxy.failed)
    finally:
        world.stop()


class SigFailingProxy:
    """A loopback HTTP proxy to a registry answering 503 for any path holding ``.sig`` (the
    cosign signature tag) and forwarding everything else."""

    def __init__(self, upstream: str):
        failed: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _do(self):
                if ".sig" in self.path:
                    failed.append(self.path)
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                req = urllib.request.Request(upstream + self.path, method=self.command, headers=headers)
                try:
                    with urllib.request.urlopen(req) as resp:
                        code, hdrs, data = resp.status, resp.getheaders(), resp.read()
                except urllib.error.HTTPError as exc:
                    code, hdrs, data = exc.code, list(exc.headers.items()), exc.read()
                self.send_response(code)
                for k, v in hdrs:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = _do

            def log_message(self, *args):
                pass

        self.failed = failed
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "SigFailingProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
