"""The one error family of lemonpack.

Every error a user can cause is a :class:`LemonpackError`; the CLI catches this family
once, prints ``str(error)`` (or ``error.to_json()`` with ``--json``) and exits with
``error.exit_code``. Anything else escaping is a bug and keeps its traceback.

Exit codes: 1 invalid input (manifest, argument), 2 usage (typer's own and :class:`UsageError`), 3 integrity
(digest mismatch) and trust (a policy refused an image: :class:`TrustError`), 4 fetch/network, 5 unsafe content (archive, path), 6 external tool
failed (nix, podman), 7 runtime (engine failed to start or probe). A disk that refuses
a write (:class:`StorageError`: no space, quota, read-only) is 1: not the input's fault,
and not an external tool's. 130: interrupted by the user (:class:`Interrupted`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

#: Characters that would split, hide or reorder a line of text output: C0/C1 controls, DEL,
#: the Unicode line/paragraph separators, the bidirectional embedding, override and isolate
#: controls (U+202A-U+202E, U+2066-U+2069: "Trojan Source", CVE-2021-42574), and lone
#: surrogates (not encodable as UTF-8).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The bidirectional controls alone (:func:`visible_bidi`).
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """``text`` with every character of :data:`_UNSAFE` escaped (``\\n``, ``\\x1b``,
    ``\\ud800``), so a name or value taken from a file prints as part of one line."""
    def esc(m: re.Match) -> str:
        ch = m.group()
        return _SHORT.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
    return _UNSAFE.sub(esc, text)


def visible_bidi(text: str) -> str:
    """``text`` with each bidirectional control character (:data:`BIDI_CONTROLS`) written as
    ``\\u202e``: untrusted text cannot reorder what follows it. Line breaks are kept."""
    return BIDI_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class LemonpackError(Exception):
    """Base of every user-facing error. ``exit_code`` is what the CLI exits with."""

    exit_code = 1
    kind = "error"

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable description: ``{"error": kind, "message": str}``."""
        return {"error": self.kind, "message": str(self)}


@dataclass(frozen=True)
class Problem:
    """One violation found in a file.

    ``file`` is the path as given, ``path`` the JSON path of the offending field
    (``platforms.linux.rocm.args[7]``, ``""`` for the document root), ``rule`` a short
    stable rule id (``unknown-field``, ``digest-pinning`` ...), ``message`` a sentence.
    """

    file: str
    path: str
    rule: str
    message: str

    #: Characters a path or message keeps (a bounded line whatever the input quoted).
    MAX_CHARS = 400

    def __post_init__(self) -> None:
        for name in ("path", "message"):
            value = getattr(self, name)
            if isinstance(value, str) and len(value) > self.MAX_CHARS:
                object.__setattr__(self, name, value[: self.MAX_CHARS - 4] + " ...")

    def __str__(self) -> str:
        """``FILE: PATH: MESSAGE [RULE]`` on one line (controls escaped, :func:`one_line`)."""
        where = f"{self.file}: {self.path}" if self.path else f"{self.file}"
        return one_line(f"{where}: {self.message} [{self.rule}]")

    def to_json(self) -> dict[str, str]:
        """``{"file", "path", "rule", "message"}``."""
        return {"file": self.file, "path": self.path, "rule": self.rule, "message": self.message}


#: Problems one file's report holds; the rest are counted in one last ``more-problems``
#: problem (docs/recipes-and-policy.md: "A file's report is bounded").
MAX_PROBLEMS = 200


@dataclass(frozen=True)
class MoreProblems(Problem):
    """The last problem of a capped report (rule ``more-problems``), carrying its count:
    ``more`` problems found and not kept, and ``stopped``: why that count is only a lower
    bound (a check that stopped early), or ``""``. :func:`bound` adds the counts of the
    parts it joins."""

    more: int = 0
    stopped: str = ""

    @classmethod
    def of(cls, file: str, more: int, stopped: str = "") -> "MoreProblems":
        """``and N more problems: fix these and run lint again`` (``at least N ... (STOPPED)``)."""
        what = f"at least {more} more problems ({stopped})" if stopped else f"{more} more problems"
        return cls(file, "", "more-problems", f"and {what}: fix these and run lint again", more, stopped)


def bound(problems: Iterable[Problem], file: str, limit: int = MAX_PROBLEMS) -> list[Problem]:
    """A file's report: the first ``limit`` problems of ``problems`` in their order, then,
    when there were more, one :class:`MoreProblems` counting them. A :class:`MoreProblems`
    met on the way (the bound of a part: the parser's, the schema's, the semantic rules',
    the policy's) is folded in: its count added, its ``stopped`` kept. Consumes
    ``problems`` lazily and holds at most ``limit`` of them, so a generator of a million
    problems costs the memory of ``limit``."""
    kept: list[Problem] = []
    more, stopped = 0, ""
    for p in problems:
        if isinstance(p, MoreProblems):
            more += p.more
            stopped = stopped or p.stopped
        elif len(kept) < limit:
            kept.append(p)
        else:
            more += 1
    return kept + ([MoreProblems.of(file, more, stopped)] if more or stopped else [])


class ManifestError(LemonpackError):
    """A recipe (or other description file) broke one or more rules.

    ``problems`` holds every :class:`Problem` found in the file, not only the first.
    """

    kind = "manifest"

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def to_json(self) -> dict[str, Any]:
        """The base shape plus ``problems``: every Problem as JSON."""
        return {"error": self.kind, "message": str(self), "problems": [p.to_json() for p in self.problems]}


class SelectionError(LemonpackError):
    """No platform block / arch override / alias fits the host or the requested target."""

    kind = "selection"


class TokenError(LemonpackError):
    """A token could not be resolved at spawn time (unknown value, leading dash, denied env)."""

    kind = "token"


class InputError(LemonpackError):
    """A value the user gave (an option, an argument, a file's content) is not one the command
    can use, and no more specific class fits: a malformed ``KEY=VALUE``, a size without a
    number, a reference without the digest an install needs, an image that is not
    lemonpack's, a refusal to overwrite. Exit 1, as any invalid input."""

    kind = "input"


class NotFoundError(LemonpackError):
    """What the user named does not exist: a recipe file or id, a model, a tag of a layout, an
    installed artifact. Exit 1."""

    kind = "not-found"


class IntegrityError(LemonpackError):
    """A digest did not match. ``expected`` and ``actual`` are ``sha256:<hex>`` strings."""

    exit_code = 3
    kind = "integrity"

    def __init__(self, what: str, expected: str, actual: str):
        self.what, self.expected, self.actual = what, expected, actual
        super().__init__(f"sha256 mismatch for {what}: expected {expected}, got {actual}")

    def to_json(self) -> dict[str, Any]:
        """The base shape plus ``what``, ``expected`` and ``actual``."""
        return {"error": self.kind, "message": str(self), "what": self.what,
                "expected": self.expected, "actual": self.actual}


class SignatureError(IntegrityError):
    """Signatures do not hold (exit 3, like a digest mismatch): an image's cosign signatures
    or a catalogue index's signature. ``reason``: ``no-signature`` (none to check),
    ``bad-signature`` (none verifies with the key: another key, or the signed bytes changed),
    ``digest-mismatch`` (a signature verifies but its payload names another image),
    ``bad-payload`` (a verified payload is not simple-signing JSON). ``details``: one line per
    signature examined. ``what``: the signed thing, for the integrity fields."""

    kind = "signature"

    def __init__(self, message: str, reason: str = "bad-signature", details: list[str] | None = None,
                 what: str = "signature"):
        self.reason, self.details = reason, list(details or [])
        self.what, self.expected, self.actual = what, "a valid signature", reason
        LemonpackError.__init__(self, message + "".join(f"\n  {d}" for d in self.details))

    def to_json(self) -> dict[str, Any]:
        """The base shape plus ``reason`` and ``details``."""
        return {"error": self.kind, "message": str(self), "reason": self.reason, "details": self.details}


class TrustError(LemonpackError):
    """A trust policy (containers-policy.json(5), :mod:`lemonpack.trust`) refused an image or
    a model, or could not be read (exit 3, a trust failure like a signature that does not
    hold). One line naming the reference, the policy file, the scope that matched and the
    reason; nothing was started or written. ``verdict``: the JSON of the verdict, when one
    was reached (``None`` for a policy file that cannot be read)."""

    exit_code = 3
    kind = "trust"

    def __init__(self, message: str, verdict: dict[str, Any] | None = None):
        self.verdict = verdict
        super().__init__(message)

    def to_json(self) -> dict[str, Any]:
        """The base shape plus ``verdict`` (or null)."""
        return {"error": self.kind, "message": str(self), "verdict": self.verdict}


class PolicyFileError(TrustError):
    """A containers-policy.json or a containers-registries.d file is malformed: an unknown,
    duplicated or invalid field rejects the whole file (containers-policy.json(5): "its
    parsing is fairly strict"), named with the file and the JSON path. Exit 3 (fail closed)."""

    kind = "policy"


class UsageError(LemonpackError):
    """The command was asked for something it cannot mean: an option value outside its
    choices, two options that exclude each other, a setting (``--mirror`` /
    ``$LEMONPACK_MIRROR``) that is not the kind of value it must be. Exit 2, as typer's own
    usage errors. ``param`` names the option or argument (``--mirror / LEMONPACK_MIRROR``),
    or is None; ``str(error)`` is the sentence without it."""

    exit_code = 2
    kind = "usage"

    def __init__(self, message: str, param: str | None = None):
        self.param = param
        super().__init__(f"{param}: {message}" if param else message)


class FetchError(LemonpackError):
    """A download failed or was refused (HTTP status, plain http to a non-loopback host)."""

    exit_code = 4
    kind = "fetch"


class MirrorSettingError(UsageError, FetchError):
    """A mirror base URL (``--mirror``, ``$LEMONPACK_MIRROR``, a catalogue's ``mirror``) that
    is not an http(s) URL with a host, or has a query or fragment. A :class:`UsageError`
    (exit 2) wherever it is raised, so the CLI and :class:`lemonpack.fetch.Mirror` agree;
    also a :class:`FetchError` for callers that catch fetch problems as a whole."""

    exit_code = 2
    kind = "usage"


class UnsafeContentError(LemonpackError):
    """An archive member or path would escape its root, or is a device/special file."""

    exit_code = 5
    kind = "unsafe"


class StorageError(LemonpackError):
    """The local disk refused a write or read that the input did not cause: no space
    (``ENOSPC``), quota (``EDQUOT``), a read-only file system, an I/O error, a denied
    permission, a cache directory that is not a directory. Exit 1: the command could not
    be carried out as asked; nothing was changed (writes are temp + rename). Unlike
    :class:`UnsafeContentError` it does not blame the archive."""

    kind = "storage"


class UnreadableFileError(LemonpackError):
    """A file the user named cannot be read: missing, a directory or another non-regular file,
    permission denied (:func:`lemonpack.files.read_user_file`). The message names what the file
    was for and its path. Exit 1."""

    kind = "unreadable"


class ConfigError(LemonpackError):
    """A setting the user provided cannot be used: a registry config or credentials file that is
    missing, not UTF-8 or not the JSON it must be; a credential helper that is not on PATH, fails
    or answers something else; ``LEMONPACK_HOST_FACTS`` or a host-facts file; ``SOURCE_DATE_EPOCH``;
    a key file; a password with no way to ask for it. Exit 1: the command cannot start as set up."""

    kind = "config"


class LayoutError(LemonpackError):
    """An OCI image layout (a local directory, or the one a base image lives in) that is missing,
    is not a layout, or does not hold together: a malformed ``index.json``, descriptor or
    manifest, a blob missing or of another size than its descriptor, a tag that is not there or
    would be repointed, a manifest that is not an image. Exit 1 (a digest that does not match is
    :class:`IntegrityError`; a blob the layout readers refuse for its bytes or size is
    :class:`LayoutBlobError`, both at once)."""

    kind = "layout"


class LayoutBlobError(IntegrityError, LayoutError):
    """A blob of an OCI image layout that is not what its descriptor says: bytes that do not
    hash to its digest, or another size (image-spec ``descriptor.md``, "Verification"). Both
    an :class:`IntegrityError` (exit 3, kind ``integrity``: what callers catch and print
    for any digest mismatch) and a :class:`LayoutError` (the layout does not hold together).
    ``what`` names the blob (its label and digest)."""


class RegistryError(LemonpackError):
    """A registry operation that cannot be carried out as asked, though the network worked: a tag
    the registry does not have when pinning, a pull or publish destination of the wrong shape (a
    digest where a tag is needed, neither; a layout tag that cannot be a registry tag), a base
    reference that is not pinned, a digest that is not ``sha256:<hex>``. Exit 1 (a failed or
    refused transfer is :class:`FetchError`, exit 4)."""

    kind = "registry"


class OutputError(LemonpackError):
    """The output path cannot be written without destroying something lemonpack did not make: it
    exists and is not a directory, or is a non-empty directory of another kind. Nothing was
    written. Exit 1."""

    kind = "output"


class BuildError(LemonpackError):
    """A build (``build``, ``install``, ``release``, a catalogue rebuild) cannot be made from its
    inputs as given, though each file is valid on its own: a recipe id named twice, a missing
    base recipe, a passthrough recipe with nothing to install, an artifact without its binary, a
    release image whose selection breaks a release rule. Exit 1."""

    kind = "build"


class CatalogueError(LemonpackError):
    """A catalogue (its sources, built index, signatures or a fetched entry) that cannot be used as
    asked: a symlink in an entry tree, an entry source of an unsupported kind, an index without
    its file, an unknown entry. Exit 1 (a signature that does not verify is
    :class:`SignatureError`)."""

    kind = "catalogue"


class LockError(LemonpackError):
    """A lock file (the contract schema lock, the extension API lock, the release lock) that
    cannot be read, or that refuses the change asked of it: a released schema is frozen, a change
    needs its reason or change record, the lock changed while it was being used. Exit 1."""

    kind = "lock"


class NotConfirmed(LemonpackError):
    """A command that needs the user's confirmation did not get it (declined, or no terminal to
    ask on and no ``--yes``). Nothing was changed. Exit 1."""

    kind = "not-confirmed"


class ToolError(LemonpackError):
    """An external tool (nix-build, podman, skopeo) failed; message carries its stderr tail."""

    exit_code = 6
    kind = "tool"


class RuntimeFailure(LemonpackError):
    """An engine failed to start, exited during its probe, or timed out."""

    exit_code = 7
    kind = "runtime"


class Interrupted(LemonpackError):
    """The user stopped a command (Ctrl-C, SIGINT) part way; the message says what was under
    way and what was, and was not, changed (exit 130, the shell's code for SIGINT)."""

    exit_code = 130
    kind = "interrupted"


__all__ = [
    "Interrupted", "LemonpackError", "MAX_PROBLEMS", "MoreProblems", "Problem", "bound", "ManifestError", "SelectionError", "TokenError", "InputError",
    "NotFoundError",
    "IntegrityError", "FetchError", "UnsafeContentError", "StorageError", "ToolError", "RuntimeFailure",
    "UsageError", "MirrorSettingError", "ConfigError", "LayoutError", "LayoutBlobError", "RegistryError", "OutputError",
    "BuildError", "CatalogueError", "LockError", "NotConfirmed", "UnreadableFileError",
]
