"""Image references, the one type and its parsers: the distribution/reference grammar
(:func:`parse_reference`), the registry form lemonpack pushes to and pulls from
(:func:`parse_registry_reference`: an explicit registry host), and pinning checks. Container
command lines are read by :mod:`lemonpack.oci.cmdline`.

Grammar (github.com/distribution/reference, ``reference.go``)::

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [domain "/"] remote-name
    domain     := host [":" port-number]
    host       := domain-name | IPv4address | "[" IPv6address "]"
    path-component := [a-z0-9]+ ( ( [_.] | "__" | [-]+ ) [a-z0-9]+ )*
    tag        := [\\w][\\w.-]{0,127}
    digest     := algorithm ":" hex   (sha256: exactly 64 lowercase hex, sha512: 128)

The first ``/``-separated component is the domain only if it contains ``.`` or ``:`` or is
``localhost`` (the Docker convention). OCI image-spec v1.1 ``descriptor.md`` ("Digests")
governs the digest part. A registry reference (``HOST[:PORT]/REPO[:TAG][@sha256:HEX]``, an
``oci://`` prefix accepted) additionally needs its registry host and a sha256 digest: a short
name (``busybox``) is refused, never searched for (containers-registries.conf(5)'s
``unqualified-search-registries`` is not used: a pin needs the host it came from).

Docker Hub is normalised as docker/distribution's ``normalize.go`` and containers/image do:
``index.docker.io`` is written ``docker.io`` (:attr:`ImageReference.host`), a one-part
repository of Docker Hub gets ``library/`` (:attr:`ImageReference.repository`:
``docker.io/busybox`` is ``library/busybox``), the registry API is requested from
``registry-1.docker.io`` (:attr:`ImageReference.endpoint`, :func:`registry_endpoint`) and
credentials are looked up under every key a Docker or podman login writes for it
(:func:`credential_keys`: ``docker.io``, ``index.docker.io``, ``https://index.docker.io/v1/``,
``registry-1.docker.io``). The ``name``/``path`` of a parsed reference stay as written (a pinned
recipe keeps the user's spelling).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from lemonpack.digest import is_sha256_digest, names_sha256
from lemonpack.errors import LemonpackError

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_PATH = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[[a-fA-F0-9:]+\]"
_DOMAIN = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

_PATH_RE = re.compile(rf"^{_PATH}$")
_DOMAIN_RE = re.compile(rf"^{_DOMAIN}$")
_TAG_RE = re.compile(rf"^{_TAG}$")
_DIGEST_RE = re.compile(rf"^{_DIGEST}$")
_HEX_LENGTHS = {"sha256": 64, "sha512": 128}
_NAME_MAX = 255

#: Docker Hub's name in references (docker/distribution ``normalize.go``: ``defaultDomain``).
DOCKER_HUB = "docker.io"
#: The older spelling of the same registry (``legacyDefaultDomain``), written ``docker.io``.
DOCKER_HUB_LEGACY = "index.docker.io"
#: The host Docker Hub's registry API (``/v2/``) answers on (docker's ``DefaultV2Registry``).
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
#: The key ``docker login`` writes Docker Hub's credentials under (docker's ``IndexServer``).
DOCKER_HUB_LOGIN_KEY = "https://index.docker.io/v1/"
#: The namespace of Docker Hub's official images (``officialRepoPrefix``).
_LIBRARY = "library/"


def normal_host(host: str) -> str:
    """``host`` (``host[:port]``) as references name it, lowercase (DNS names are
    case-insensitive, RFC 4343: ``Docker.IO`` is ``docker.io``): ``index.docker.io`` is
    ``docker.io`` (docker/distribution ``normalize.go``), so is Docker Hub's API host
    ``registry-1.docker.io`` (the same registry: its one-part names get ``library/`` too), and
    so is any of them with the default HTTPS port ``:443`` written out; every other host
    otherwise unchanged."""
    host = host.lower()
    hub = (DOCKER_HUB, DOCKER_HUB_LEGACY, DOCKER_HUB_ENDPOINT)
    if host.endswith(":443") and host[:-4] in hub:
        host = host[:-4]
    return DOCKER_HUB if host in hub else host


def registry_endpoint(host: str) -> str:
    """The ``host[:port]`` to send ``/v2/`` requests to for registry ``host``: Docker Hub's
    API host ``registry-1.docker.io`` for ``docker.io`` (and ``index.docker.io``), else
    ``host`` itself."""
    return DOCKER_HUB_ENDPOINT if normal_host(host) == DOCKER_HUB else host


def credential_keys(host: str) -> list[str]:
    """The keys of an auth file (containers-auth.json(5), Docker's ``config.json``) that hold
    credentials for registry ``host``, most specific first. Docker Hub's are every spelling a
    login writes: ``docker.io`` (podman, skopeo), ``https://index.docker.io/v1/`` (docker),
    ``index.docker.io`` and ``registry-1.docker.io``; for a loopback host the other loopback
    spelling (``localhost:P`` / ``127.0.0.1:P``) too."""
    host = normal_host(host)
    if host == DOCKER_HUB:
        return [DOCKER_HUB, DOCKER_HUB_LOGIN_KEY, DOCKER_HUB_LEGACY, DOCKER_HUB_ENDPOINT]
    names = [host]
    if host.startswith("localhost"):
        names.append("127.0.0.1" + host[len("localhost"):])
    elif host.startswith("127.0.0.1"):
        names.append("localhost" + host[len("127.0.0.1"):])
    return names


class InvalidReferenceError(LemonpackError, ValueError):
    """A string is not a valid image reference. ``reference`` is the input, ``reason`` says why
    (a clause without the reference); the message is ``invalid image reference 'REF': REASON``
    unless ``message`` gives a whole sentence that names the input itself."""

    kind = "reference"

    def __init__(self, reference: str, reason: str, message: str | None = None):
        self.reference, self.reason = reference, reason
        super().__init__(message or f"invalid image reference {reference!r}: {reason}")


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference.

    ``name`` is ``domain/path`` (or ``path`` when there is no domain), ``domain`` is
    ``host[:port]`` or ``None``, ``path`` the repository path, ``tag`` and ``digest``
    (``algo:hex``) are ``None`` when absent. The registry's view of the same reference
    (distribution-spec: ``/v2/<name>/manifests/<reference>``): :attr:`host`,
    :attr:`repository`, :attr:`ref`, :meth:`with_ref`.
    """

    name: str
    domain: str | None
    path: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    @property
    def pinned(self) -> bool:
        """True when the reference carries a digest (whatever its tag)."""
        return self.digest is not None

    @property
    def host(self) -> str:
        """The registry host (``host[:port]``, the :attr:`domain`, ``index.docker.io`` written
        ``docker.io``) of a registry reference (:func:`parse_registry_reference` guarantees one):
        the name credentials and registries.conf entries are looked up by. ``ValueError`` for a
        reference without one (a bug: a caller talking to a registry parsed it with
        :func:`parse_reference`)."""
        if self.domain is None:
            raise ValueError(f"{self} names no registry host")
        return normal_host(self.domain)

    @property
    def endpoint(self) -> str:
        """The ``host[:port]`` the registry API is requested from (:func:`registry_endpoint`:
        ``registry-1.docker.io`` for Docker Hub)."""
        return registry_endpoint(self.host)

    @property
    def repository(self) -> str:
        """The repository path on the registry (the :attr:`path`, lowercase; a one-part name
        on Docker Hub gets ``library/``: ``docker.io/busybox`` is ``library/busybox``)."""
        if self.domain is not None and normal_host(self.domain) == DOCKER_HUB and "/" not in self.path:
            return _LIBRARY + self.path
        return self.path

    @property
    def ref(self) -> str | None:
        """The manifest reference to request: the digest (preferred) or the tag, ``None`` when
        neither (distribution-spec "pulling manifests": ``<reference>`` is a tag or a digest)."""
        return self.digest or self.tag

    def with_ref(self, *, tag: str | None = None, digest: str | None = None) -> "ImageReference":
        """A copy naming ``tag`` / ``digest`` instead (both replaced; ``None`` drops one)."""
        return replace(self, tag=tag, digest=digest)


def parse_reference(s: str) -> ImageReference:
    """Parse ``domain[:port]/path[:tag][@algo:hex]`` into an :class:`ImageReference`.

    Raises :class:`InvalidReferenceError` (a ``ValueError`` and a ``LemonpackError``) on
    any malformed input: empty string, uppercase in the path, bad tag, a digest whose
    algorithm is unknown-length-invalid (sha256 needs exactly 64 lowercase hex digits,
    sha512 128), a name longer than 255 characters.

    Spec: distribution/reference grammar; OCI image-spec v1.1 ``descriptor.md`` (digests).
    """
    if not isinstance(s, str) or not s:
        raise InvalidReferenceError(str(s), "empty reference")
    rest, digest = s, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise InvalidReferenceError(s, f"malformed digest {digest!r}")
        algo, hexpart = digest.split(":", 1)
        want = _HEX_LENGTHS.get(algo)
        if want is not None and (len(hexpart) != want or hexpart != hexpart.lower()):
            raise InvalidReferenceError(s, _digest_length_reason(algo, hexpart))
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1:]
        if not _TAG_RE.match(tag):
            raise InvalidReferenceError(s, f"malformed tag {tag!r}")
    if not rest:
        raise InvalidReferenceError(s, "missing repository name")
    if len(rest) > _NAME_MAX:
        raise InvalidReferenceError(s, f"repository name longer than {_NAME_MAX} characters")
    domain, path = _split_domain(rest)
    if domain is not None and not _DOMAIN_RE.match(domain):
        raise InvalidReferenceError(s, f"malformed domain {domain!r}")
    if not _PATH_RE.match(path):
        if path.lower() != path:
            raise InvalidReferenceError(s, f"repository path {path!r} must be lowercase")
        raise InvalidReferenceError(s, f"malformed repository path {path!r}")
    return ImageReference(name=rest, domain=domain, path=path, tag=tag, digest=digest)


def parse_registry_reference(s: str) -> ImageReference:
    """Parse ``HOST[:PORT]/REPO[:TAG][@sha256:HEX]`` (an ``oci://`` prefix is accepted and
    dropped): a reference lemonpack sends to the registry it names.

    Raises :class:`InvalidReferenceError` (a ``LemonpackError``, exit 1) for a malformed
    reference, a containers-transports(5) reference (``oci:DIR:TAG``, ``docker://NAME``: said
    so, not read as a host ``oci:``), a short name without a registry host (``busybox``, ``library/x``: the first
    component must look like a host: contain ``.`` or ``:`` or be ``localhost``; no search
    registry is tried, ``unqualified-search-registries`` is not read: write
    ``docker.io/library/x``), a registry host alone (``docker.io``, ``localhost:5000``: "'docker.io'
    is a registry host with no repository"), or a digest that is not sha256. Docker Hub names are normalised
    through :attr:`ImageReference.host`, :attr:`~ImageReference.repository` and
    :attr:`~ImageReference.endpoint` (module docstring).

    Spec: distribution/reference grammar; OCI distribution-spec v1.1 ("pulling manifests":
    ``<reference>`` is a tag or a digest).
    """
    text = s[len("oci://"):] if s.startswith("oci://") else s
    transport, colon, after = text.partition(":")
    if colon and transport in _TRANSPORTS and not after[:1].isdigit():  # ``docker:5000/x`` is a host and port
        hint = (f"drop the {transport}:// prefix" if transport == "docker" and after.startswith("//")
                else "a local layout or store is not a registry")
        raise InvalidReferenceError(s, f"'{transport}:' is a containers-transports(5) prefix, not a registry host "
                                       f"({hint}); write HOST[:PORT]/REPOSITORY[:TAG|@sha256:...] "
                                       "(e.g. 127.0.0.1:5000/engines/llamacpp:v1)")
    img = parse_reference(text)
    if img.domain is None:
        bare = next((h for h in (text.partition("@")[0], img.name) if is_registry_host(h)), None)
        if bare is not None:  # ``docker.io``, ``localhost:5000``: a host alone, no repository
            reason = f"a registry host with no repository; write {bare}/NAMESPACE/REPO[:TAG]"
            raise InvalidReferenceError(s, reason, message=f"{bare!r} is {reason}")
        hub = img.path if "/" in img.path else f"library/{img.path}"
        raise InvalidReferenceError(s, "a short name, no registry host: lemonpack does not search "
                                       "registries for it (unqualified-search-registries is not used: a pin needs "
                                       "the host); write HOST[:PORT]/REPOSITORY[:TAG] (e.g. "
                                       f"docker.io/{hub} or 127.0.0.1:5000/engines/llamacpp:v1)")
    if img.digest is not None and not names_sha256(img.digest):
        raise InvalidReferenceError(s, "only sha256 digests are supported")
    return img


def is_registry_host(text: str) -> bool:
    """Whether ``text`` is a registry as a reference's first component names one on its own:
    ``host[:port]`` of the reference grammar that contains ``.`` or a ``:PORT``, an IPv6
    literal, or is ``localhost`` (Docker's rule), with no ``/`` (so no repository), e.g.
    ``127.0.0.1:5000``, ``registry.example``, ``localhost:5000``."""
    if not isinstance(text, str) or not _DOMAIN_RE.fullmatch(text):
        return False
    host = text.rsplit(":", 1)[0] if not text.endswith("]") and ":" in text else text
    return "." in host or ":" in text or host == "localhost" or text.startswith("[")


# containers-transports(5) names: ``oci:DIR:TAG``, ``docker://NAME`` ... typed where a registry
# reference belongs would otherwise read as a malformed host ``oci:``.
_TRANSPORTS = frozenset({"oci", "oci-archive", "docker", "docker-archive", "docker-daemon",
                         "containers-storage", "dir", "sif"})


def _split_domain(name: str) -> tuple[str | None, str]:
    first, sep, remainder = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"
                or first.lower() != first):
        return first, remainder
    return None, name


def _digest_length_reason(algo: str, hexpart: str) -> str:
    want = _HEX_LENGTHS[algo]
    if len(hexpart) != want:
        return f"digest has {len(hexpart)} hex digits, needs {want}"
    return f"{algo} digest must be lowercase hex"


def check_pinned(image: str) -> str | None:
    """Say why ``image`` is not pinned by digest, or ``None`` when it is.

    Pinned means ``name[:tag]@sha256:<64 lowercase hex>`` and a valid reference otherwise.
    Returns a one-sentence human message for: a template token in the reference (any
    ``{``: it cannot be pinned before resolution), no digest (mutable tag), a malformed
    digest (``"digest has 62 hex digits, needs 64"``, uppercase, non-hex, other algorithm)
    or an otherwise malformed reference. Never raises for string input.

    Spec: OCI image-spec v1.1 ``descriptor.md`` (digests); distribution/reference grammar.
    """
    if "{" in image:
        return (f"image reference {image!r} contains a token; an image must be a literal "
                "reference pinned by @sha256 digest")
    if "@" not in image:
        return (f"image reference {image!r} has no digest: a tag is mutable; "
                "pin it as name[:tag]@sha256:<64 hex digits>")
    digest = image.split("@", 1)[1]
    algo, colon, hexpart = digest.partition(":")
    if not colon:
        return f"image reference {image!r} has a malformed digest {digest!r} (expected sha256:<hex>)"
    if algo != "sha256":
        return f"image reference {image!r} uses digest algorithm {algo!r}; only sha256 is accepted"
    if not re.fullmatch(r"[0-9a-fA-F]*", hexpart):
        return f"image reference {image!r} has a digest with non-hex characters"
    if len(hexpart) != 64:
        return f"image reference {image!r}: digest has {len(hexpart)} hex digits, needs 64"
    if hexpart != hexpart.lower():
        return f"image reference {image!r}: digest must be lowercase hex"
    try:
        parse_reference(image)
    except InvalidReferenceError as exc:
        return f"image reference {image!r} is malformed: {exc.reason}"
    if not is_sha256_digest(digest):  # pragma: no cover - covered by the checks above
        return f"image reference {image!r} is not pinned by sha256 digest"
    return None


def is_tag(s: str) -> bool:
    """True when ``s`` is a tag of the distribution grammar (``[\\w][\\w.-]{0,127}``): what a
    registry accepts as ``<reference>`` in ``/v2/<name>/manifests/<reference>``."""
    return isinstance(s, str) and bool(_TAG_RE.match(s)) and s.isascii()


def split_ref_name(ref_name: str) -> tuple[str | None, str]:
    """An OCI layout tag (``org.opencontainers.image.ref.name``) as ``(image name, tag)``.

    annotations.md lets the annotation be a tag (``v1``: ``(None, "v1")``) or a full reference
    (skopeo and podman write ``docker.io/x/a:1``: ``("docker.io/x/a", "1")``; a name without a
    tag gets ``latest``). Raises :class:`InvalidReferenceError` when it is neither (or names a
    digest, which says nothing of a name to give the image).
    """
    if is_tag(ref_name):
        return None, ref_name
    ref = parse_reference(ref_name)
    if ref.digest is not None:
        raise InvalidReferenceError(ref_name, "a layout tag naming a digest cannot name an image")
    return ref.name, ref.tag or "latest"


__all__ = [
    "is_tag", "split_ref_name", "normal_host", "registry_endpoint", "credential_keys",
    "DOCKER_HUB", "DOCKER_HUB_ENDPOINT", "DOCKER_HUB_LOGIN_KEY", "DOCKER_HUB_LEGACY",
    "ImageReference", "InvalidReferenceError", "parse_reference", "parse_registry_reference", "check_pinned",
]
