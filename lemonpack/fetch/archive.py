"""Safe extraction of downloaded artifacts: tar (plain, gzip, bzip2, xz), zip, or one file.

Format detection looks at content first (magic bytes: gzip ``1f 8b``, bzip2 ``BZh``, xz
``fd 37 7a 58 5a 00``, zip ``PK\\x03\\x04``/``PK\\x05\\x06``, POSIX tar ``ustar`` at offset
257, also inside a compressed stream), then at ``name_hint`` (``.tar``, ``.tgz``,
``.tar.gz`` ...) for old tars without the ``ustar`` magic. Anything else, including a
compressed single file such as ``model.gguf.gz``, is "not an archive" and is placed as
``dest/<name_hint>`` with mode 0755, bytes unchanged.

Safety rules (as Python's ``tarfile`` "data" filter, PEP 706, but raising instead of
skipping), each violation an ``UnsafeContentError`` naming the archive and the member: no
absolute member names, no ``..`` component, no backslash or NUL in a name (the one
path-component rule, :func:`lemonpack.safetree.path_problem`, after tar's ``./`` and
trailing ``/`` are dropped), no OCI whiteout names (``.wh.*``), no
symlink that resolves outside ``dest`` (judged by :func:`lemonpack.safetree.symlink_problem`,
the same function the OCI layer writer uses: the target is walked following the links
already extracted, right after the link is created, and once more over the finished
tree), no hardlink to anything but an already extracted regular file inside ``dest``, no
device files or fifos, no writing through a symlink extracted earlier, and no later
member replacing a symlink or a directory (either would change what an earlier check
saw). Setuid, setgid and sticky bits are dropped; owners are not restored; tar
modification times are (zip times, which carry no time zone, are not).

File-system refusals: an ``OSError`` while writing a member is reported, never raised as
is (its message would name a scratch path). When the member's own name or shape is what
the file system refuses (:data:`MEMBER_ERRNOS`: a component longer than ``NAME_MAX``, a
path longer than ``PATH_MAX``, a name the file system cannot store ...) it is an
``UnsafeContentError`` naming the archive and the member, as for the rules above; anything
else (no space, quota, read-only file system, I/O error, permission) is the local disk's
fault, not the archive's: a ``StorageError`` (exit 1) saying so.

Atomicity: everything is extracted into a temp sibling directory of ``dest`` which is
``os.replace``-d onto ``dest`` at the end; on any failure the temp directory is removed
and ``dest`` is untouched. Tars are read as a stream (``r|*``) and validated member by
member; zips are read through their central directory, member by member. Neither is
loaded into memory. Archives are extracted as-is (no strip-components).
"""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable, cast

from lemonpack.errors import StorageError, UnsafeContentError
from lemonpack.files import commit, os_error_reason
from lemonpack.fetch.staging import remove_tree
from lemonpack.safetree import name_problem, path_problem, safe_component, symlink_problem, target_problem

_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz")
_COPY_CHUNK = 1 << 20

MEMBER_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST, errno.ENOTDIR, errno.EISDIR,
                           errno.EINVAL, errno.EILSEQ, errno.EMLINK, errno.ENOTEMPTY})
"""``OSError`` numbers that mean the file system refuses a member's name or shape (the
archive's fault, exit 5); any other number is the disk's (``StorageError``, exit 1)."""


def os_failure(label: str, member: str | None, exc: OSError) -> StorageError | UnsafeContentError:
    """The lemonpack error for ``exc`` raised while unpacking ``member`` (None: not while
    writing a member) of the archive ``label``: see the module docstring. The message uses
    ``exc.strerror`` only, never the path (a scratch directory) ``exc`` names."""
    reason = exc.strerror or type(exc).__name__
    if member is not None and exc.errno in MEMBER_ERRNOS:
        return UnsafeContentError(f"{label}: unsafe member {member!r}: the file system refuses it: {reason}")
    what = f"member {member!r}" if member is not None else "it"
    return StorageError(f"{label}: cannot unpack {what}: {reason} (a problem of the local disk, "
                        f"not of the archive)")


def detect_format(archive: Path, name_hint: str) -> str:
    """``"tar"``, ``"zip"`` or ``"file"`` for ``archive`` (see the module docstring)."""
    with open(archive, "rb") as fh:
        head = fh.read(512)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    opener: Callable[..., Any] | None = None
    if head.startswith(b"\x1f\x8b"):
        opener = gzip.open
    elif head.startswith(b"BZh"):
        opener = bz2.open
    elif head.startswith(b"\xfd7zXZ\x00"):
        opener = lzma.open
    if opener is not None:
        try:
            with opener(archive, "rb") as fh:
                head = fh.read(512)
        except (OSError, EOFError, lzma.LZMAError):
            head = b""
    if head[257:262] == b"ustar":
        return "tar"
    if name_hint.lower().endswith(_TAR_SUFFIXES):
        return "tar"
    return "file"


def extract(archive: Path, dest: Path, *, name_hint: str, label: str | None = None,
            file_mode: int | None = 0o755) -> None:
    """Extract ``archive`` into ``dest`` safely and atomically (see the module docstring).

    ``archive``: the file (e.g. a cache entry); ``dest``: a directory that must not exist
    yet, or be empty; ``name_hint``: the URL basename, used for format detection and as the
    file name of a non-archive; ``label``: how errors name the archive (e.g. its URL;
    default the path of ``archive``), so no scratch path reaches a user. Raises
    ``UnsafeContentError`` (naming archive and member) on a hostile member, a member the
    file system refuses (:func:`os_failure`) or a bad ``name_hint``; ``StorageError`` when
    the disk fails (no space ...); ``FileExistsError`` if ``dest`` is a non-empty directory
    or a file; ``tarfile.TarError``/``zipfile.BadZipFile``/``OSError`` without an errno
    on a corrupt archive. On any error nothing is left at ``dest`` or beside it.
    ``file_mode``: the mode of a non-archive's one file (default 0755: a downloaded engine
    binary carries no mode); ``None`` keeps ``archive``'s own: 0755 when it has an execute
    bit, else 0644 (``lemonpack unpack`` of a local file that is not an archive).
    """
    archive, dest = Path(archive), Path(dest)
    if dest.exists() or dest.is_symlink():
        if not dest.is_dir() or dest.is_symlink() or any(dest.iterdir()):
            raise FileExistsError(f"extraction target exists and is not an empty directory: {dest}")
    shown = label if label is not None else str(archive)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # ``afile/sub`` with ``afile`` a file: say which, not "File exists"
        raise StorageError(f"cannot unpack into {dest}: {os_error_reason(exc, dest)}") from None
    try:
        kind = detect_format(archive, name_hint)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.extract-"))
    except OSError as exc:
        raise os_failure(shown, None, exc) from None
    ex = _Extractor(archive, tmp, shown)
    try:
        if kind == "tar":
            ex.tar()
        elif kind == "zip":
            ex.zip()
        else:
            ex.current = name_hint
            _single_file(archive, tmp, name_hint, shown, file_mode)
        ex.current = None
        os.chmod(tmp, 0o755)
        commit(tmp, dest, durable=False)  # a tree extracted from a verified archive, re-made on demand
    except OSError as exc:
        remove_tree(tmp)
        if exc.errno is None:  # e.g. gzip.BadGzipFile: a corrupt archive, for the caller
            raise
        raise os_failure(shown, ex.current, exc) from None
    except BaseException:
        remove_tree(tmp)
        raise


def _single_file(archive: Path, tmp: Path, name_hint: str, label: str, mode: int | None = 0o755) -> None:
    """Copy a non-archive to ``tmp/<name_hint>`` with ``mode`` (``None``: 0755 when ``archive``
    has an execute bit, else 0644)."""
    if not safe_component(name_hint):  # safetree's rule: not empty, '.', '..', no '/', backslash, NUL
        raise UnsafeContentError(f"{label}: unsafe file name {name_hint!r} for a single-file artifact")
    why = name_problem(name_hint)
    if why:
        raise UnsafeContentError(f"{label}: unsafe file name {name_hint!r}: {why}")
    target = tmp / name_hint
    with open(archive, "rb") as src, open(target, "xb") as out:
        shutil.copyfileobj(src, out, _COPY_CHUNK)
        if mode is None:
            mode = 0o755 if os.fstat(src.fileno()).st_mode & 0o111 else 0o644
    os.chmod(target, mode)


def _gzip_reader(path: Path):
    """A reader of the gzip file ``path`` (RFC 1952, every member) inflated by zlib-ng
    (about 40 % of zlib's CPU per byte, measured on a 308 MiB tar.gz; the same bytes out) in
    a thread of its own (``zlib_ng.gzip_ng_threaded``, 1 MiB blocks), so inflating overlaps
    the tar's parsing and the file writes. Raises what ``gzip.open`` raises
    (``gzip.BadGzipFile``, ``EOFError`` when truncated) and ``zlib_ng.zlib_ng.error`` for
    corrupt deflate data."""
    from zlib_ng import gzip_ng_threaded

    return gzip_ng_threaded.open(path, "rb", threads=1)


class _Extractor:
    """Member-by-member writer into ``root`` with the safety checks of the module docstring."""

    def __init__(self, archive: Path, root: Path, label: str):
        self.archive = archive
        self.root = root
        self.label = label
        self.dir_modes: dict[str, tuple[int, float | None]] = {}
        self.links: dict[str, str] = {}  # rel -> member name, every symlink created
        self.current: str | None = None  # the member being written (errors name it)

    def unsafe(self, member: str, why: str) -> UnsafeContentError:
        return UnsafeContentError(f"{self.label}: unsafe member {member!r}: {why}")

    def relpath(self, name: str) -> str:
        """Normalised relative path of a member name; '' for the root. Raises on escapes."""
        if name.startswith("/") or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
            raise self.unsafe(name, "absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]  # tar's "./a", "dir/"
        rel = "/".join(parts)
        why = (path_problem(rel) if parts else None) or name_problem(rel)
        if why:
            raise self.unsafe(name, why)
        return rel

    def prepare(self, member: str, rel: str) -> str:
        """Create the parent directories of ``rel`` (refusing symlinked parents); return the
        absolute target path with any previous non-directory entry removed."""
        parts = rel.split("/")
        cur = str(self.root)
        for p in parts[:-1]:
            cur = os.path.join(cur, p)
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                os.mkdir(cur, 0o700)
                self.dir_modes.setdefault(os.path.relpath(cur, self.root), (0o755, None))
                continue
            if stat.S_ISLNK(st.st_mode):
                raise self.unsafe(member, f"path goes through the symlink {os.path.relpath(cur, self.root)!r}")
            if not stat.S_ISDIR(st.st_mode):
                raise self.unsafe(member, f"parent {os.path.relpath(cur, self.root)!r} is not a directory")
        target = os.path.join(cur, parts[-1])
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return target
        if stat.S_ISLNK(st.st_mode):
            raise self.unsafe(member, f"replaces the symlink {rel!r} extracted earlier")
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(target)
        return target

    def write_file(self, member: str, rel: str, src, mode: int, mtime: float | None) -> None:
        target = self.prepare(member, rel)
        if os.path.isdir(target):
            raise self.unsafe(member, "file over an existing directory")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, _COPY_CHUNK)
        os.chmod(target, mode & 0o777)
        if mtime is not None:
            os.utime(target, (mtime, mtime))

    def make_dir(self, member: str, rel: str, mode: int, mtime: float | None) -> None:
        if rel == "":
            return
        target = self.prepare(member, rel)
        if not os.path.isdir(target):
            os.mkdir(target, 0o700)
        self.dir_modes[rel] = ((mode & 0o777) | 0o700, mtime)

    def make_symlink(self, member: str, rel: str, link: str) -> None:
        if rel == "":
            raise self.unsafe(member, "symlink at the destination root")
        why = target_problem(link)
        if why:
            raise self.unsafe(member, why)
        target = self.prepare(member, rel)
        if os.path.isdir(target):
            raise self.unsafe(member, "symlink over an existing directory")
        os.symlink(link, target)
        self.links[rel] = member
        why = symlink_problem(self.root, rel)  # with the link in place: a link through itself loops
        if why:
            raise self.unsafe(member, why)

    def make_hardlink(self, member: str, rel: str, link: str) -> None:
        if link.startswith("/"):
            raise self.unsafe(member, f"hardlink to absolute path {link!r}")
        parts = [p for p in link.split("/") if p not in ("", ".")]
        source_rel = "/".join(parts)
        why = path_problem(source_rel)
        if why in ("empty path", "'..' component"):
            raise self.unsafe(member, f"hardlink target {link!r} leaves the destination")
        if why:
            raise self.unsafe(member, f"hardlink target {link!r}: {why}")
        cur = str(self.root)
        for p in parts:
            cur = os.path.join(cur, p)
            if os.path.islink(cur):
                raise self.unsafe(member, f"hardlink target {link!r} goes through a symlink")
        if not os.path.isfile(cur):
            raise self.unsafe(member, f"hardlink target {link!r} is not an extracted regular file")
        target = self.prepare(member, rel)
        if target == cur:
            return
        if os.path.isdir(target):
            raise self.unsafe(member, "hardlink over an existing directory")
        os.link(os.path.join(self.root, source_rel), target, follow_symlinks=False)

    def finish_dirs(self) -> None:
        """Judge every symlink once more against the finished tree (what the layer writer
        will see), then apply directory modes and mtimes, deepest first."""
        for rel, member in self.links.items():
            why = symlink_problem(self.root, rel)
            if why:
                raise self.unsafe(member, why)
        for rel in sorted(self.dir_modes, key=lambda r: r.count("/"), reverse=True):
            mode, mtime = self.dir_modes[rel]
            path = os.path.join(self.root, rel)
            os.chmod(path, mode)
            if mtime is not None:
                os.utime(path, (mtime, mtime))

    def tar(self) -> None:
        """Stream a (possibly compressed) tar, validating each member before writing it. A
        gzip stream is inflated by zlib-ng (:func:`_gzip_reader`) and read to its end, so its
        CRC-32 is checked (``tarfile`` stops at the tar's end marker and checks none); the
        other compressions are ``tarfile``'s."""
        with open(self.archive, "rb") as f:
            magic = f.read(2)
        if magic != b"\x1f\x8b":
            with tarfile.open(self.archive, mode="r|*", bufsize=_COPY_CHUNK) as tf:
                self._members(tf)
            return
        from zlib_ng import zlib_ng

        corrupt = cast("type[Exception]", zlib_ng.error)  # its stub calls the class an instance
        try:
            with _gzip_reader(self.archive) as gz:
                with tarfile.open(fileobj=gz, mode="r|", bufsize=_COPY_CHUNK) as tf:
                    self._members(tf)
                while gz.read(_COPY_CHUNK):  # to the end: every member's CRC-32 and length checked
                    pass
        except corrupt as exc:  # a corrupt deflate stream: what zlib.error is to tarfile's own reader
            raise tarfile.ReadError(f"corrupt gzip stream: {exc}") from None

    def _members(self, tf: tarfile.TarFile) -> None:
        """Write each member of ``tf`` (a tar being streamed) with the checks of the module docstring."""
        for m in tf:
            self.current = m.name
            rel = self.relpath(m.name)
            if m.ischr() or m.isblk():
                raise self.unsafe(m.name, "device file")
            if m.isfifo():
                raise self.unsafe(m.name, "fifo")
            if m.isdir():
                self.make_dir(m.name, rel, m.mode, m.mtime)
            elif m.issym():
                self.make_symlink(m.name, rel, m.linkname)
            elif m.islnk():
                if rel == "":
                    raise self.unsafe(m.name, "hardlink at the destination root")
                self.make_hardlink(m.name, rel, m.linkname)
            elif m.isreg():
                if rel == "":
                    raise self.unsafe(m.name, "file at the destination root")
                src = tf.extractfile(m)
                self.write_file(m.name, rel, src, m.mode, m.mtime)
            else:
                raise self.unsafe(m.name, f"unsupported member type {m.type!r}")
            self.current = None
        self.finish_dirs()

    def zip(self) -> None:
        """Extract a zip member by member (unix modes and symlinks honoured when present)."""
        with zipfile.ZipFile(self.archive) as zf:
            for info in zf.infolist():
                name = info.filename
                self.current = name
                rel = self.relpath(name)
                unix = info.external_attr >> 16 if info.create_system == 3 else 0
                ftype = stat.S_IFMT(unix)
                if ftype in (stat.S_IFCHR, stat.S_IFBLK):
                    raise self.unsafe(name, "device file")
                if ftype == stat.S_IFIFO:
                    raise self.unsafe(name, "fifo")
                if ftype == stat.S_IFSOCK:
                    raise self.unsafe(name, "socket")
                mtime = None
                if info.is_dir() or ftype == stat.S_IFDIR:
                    self.make_dir(name, rel, (unix & 0o777) or 0o755, mtime)
                elif ftype == stat.S_IFLNK:
                    if info.file_size > 4096:
                        raise self.unsafe(name, "symlink target too long")
                    link = zf.read(info).decode("utf-8", "surrogateescape")
                    self.make_symlink(name, rel, link)
                else:
                    if rel == "":
                        raise self.unsafe(name, "file at the destination root")
                    with zf.open(info) as src:
                        self.write_file(name, rel, src, (unix & 0o777) or 0o644, mtime)
                self.current = None
        self.finish_dirs()


__all__ = ["extract", "detect_format", "os_failure", "MEMBER_ERRNOS"]
