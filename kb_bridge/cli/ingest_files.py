"""Which files `kb-bridge ingest PATH...` loads, and under which `source_path`.

The roots are the paths given on the command line, each resolved first: a root that is a symbolic link
counts as what it points to (its name included); a root inside another folder given is covered by it and
dropped. Each root has a `source_path` prefix of its own, and a file below it is stored as
`PREFIX/its/path/below/the/root` (a file given by itself: `PREFIX`):

- `--prefix P` (one per PATH, in order) gives it;
- otherwise a single root's prefix is its name (`ingest ~/handbook` stores `handbook/intro.md`), as it
  always was, so a rerun matches what earlier runs stored;
- several roots are named by their path below the deepest folder holding all of them
  (`/usr/share/doc/valgrind/html` and `/usr/share/doc/libxslt1-dev/html` become `valgrind/html` and
  `libxslt1-dev/html`); roots side by side in one folder keep their names.

Two different files that would still get the same source_path stop the run before anything is written,
with both named (Collision). Each root is also known by a tag, `ingest-root:` and 16 hex digits of the
SHA-256 of its real path, that every document it loads carries: ingest.py never replaces, moves or
deletes a document another root loaded.

Below a folder root:

- hidden entries (a name starting with '.') are left out;
- only regular files are taken (not sockets, pipes or devices);
- a symbolic link is followed only when what it resolves to lies inside one of the roots. It then stands
  for its target: the target is loaded once, under the target's own path, whatever the number of links
  to it (so a link inside the folder never makes a second document). A folder reached through a link is
  walked once; a link back up the tree is not walked again.
- a link that resolves outside every root (a link to ~/.aws/credentials, to /etc), that is broken, or that
  loops, is skipped and reported: loading a folder never reads a file the user did not hand over;
- folders are listed and files reached one name at a time from the root (ingest_paths.py): never through a
  link put in a folder's place since, and however long the path (deeper than PATH_MAX included).

A file or folder that cannot be taken is a Problem, reported as failed while the others go on: a folder that
cannot be listed or a file that cannot be stat'ed (permissions, a share gone away; --prune keeps every
document at or below it: ingest_plan.py), and a name that is not UTF-8 (the engine stores source_path and
title as UTF-8 text; such a name is shown with its bytes escaped, as `shown` does).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from kb_bridge.cli import ingest_paths
from kb_bridge.errors import InvalidArgument


ROOT_TAG = "ingest-root:"


class Collision(InvalidArgument):
    """Two files of one run would be stored under one source_path."""


@dataclasses.dataclass(frozen=True)
class Root:
    """A path given on the command line: its real path, its source_path prefix and the tag of its documents."""

    path: Path
    prefix: str

    @property
    def tag(self) -> str:
        return ROOT_TAG + hashlib.sha256(os.fsencode(self.path)).hexdigest()[:16]

    def file_for(self, source_path: str) -> Path | None:
        """Where the file stored as `source_path` lives below this root; None when it is not below it."""
        if source_path == self.prefix:
            return self.path
        if source_path.startswith(self.prefix + "/"):
            return self.path / source_path[len(self.prefix) + 1:]
        return None


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A file to ingest: its real path (no link in it), the path it is stored under, and what `stat` said."""

    path: Path
    source_path: str
    size: int
    root: Root
    mtime_ns: int = 0
    inode: int = 0


@dataclasses.dataclass(frozen=True)
class SkippedLink:
    """A symbolic link that was not followed: where it is (as a source_path would say) and why."""

    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Problem:
    """A file or folder that cannot be taken: its real path, its source_path as shown (`shown`), and why."""

    path: Path
    source_path: str
    reason: str


@dataclasses.dataclass
class Found:
    roots: list[Root] = dataclasses.field(default_factory=list)
    candidates: list[Candidate] = dataclasses.field(default_factory=list)
    unsupported: list[str] = dataclasses.field(default_factory=list)  # source paths left out for their type
    links: list[SkippedLink] = dataclasses.field(default_factory=list)
    problems: list[Problem] = dataclasses.field(default_factory=list)


def shown(text: str) -> str:
    """`text` (a path as os.fsdecode gives it) printable as UTF-8: bytes that are not UTF-8 escaped (\\xff)."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def unreadable(error: OSError) -> str:
    """Why a file failed when reading it raised `error` (the walk, the plan's hashing, the upload)."""
    return f"cannot read the file: {error.strerror or error}"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a byte os.fsdecode could not decode, held as a lone surrogate
        return False
    return True


def resolve_roots(paths: Sequence[Path], prefixes: Sequence[str] = ()) -> list[Root]:
    """The roots with their prefixes (the rule above); InvalidArgument for a missing path or a bad --prefix."""
    if prefixes and len(prefixes) != len(paths):
        raise InvalidArgument("--prefix", f"give one --prefix per PATH ({len(paths)}), not {len(prefixes)}")
    named: list[str | None] = [check_prefix(prefix) for prefix in prefixes] or [None] * len(paths)
    given = [(_resolved_root(path), prefix) for path, prefix in zip(paths, named, strict=True)]
    kept: list[tuple[Path, str | None]] = []
    for path, prefix in given:
        inside = any(other != path and other in path.parents and other.is_dir() for other, _ in given)
        if not inside and path not in [kept_path for kept_path, _ in kept]:
            kept.append((path, prefix))
    if len(kept) == 1 or prefixes:
        return [Root(path, prefix or path.name or "root") for path, prefix in kept]
    base = Path(os.path.commonpath([path.parent for path, _ in kept]))
    return [Root(path, path.relative_to(base).as_posix() if path != base else "root") for path, _ in kept]


def check_prefix(prefix: str | None) -> str:
    """A --prefix: a relative path of plain names ('a/b'), no '.', '..', empty part or control character."""
    text = (prefix or "").strip("/")
    parts = text.split("/")
    if not text or len(text) > 200 or any(part in ("", ".", "..") for part in parts) \
            or any(ord(char) < 32 for char in text):
        raise InvalidArgument("--prefix", f"{prefix!r} is not a relative path of plain names such as 'docs/html'")
    return text


def find_files(paths: Sequence[Path], pattern: str | None, extensions: Iterable[str],
               prefixes: Sequence[str] = ()) -> Found:
    """The files to ingest, in a stable order. A folder is walked below it; `pattern` (fnmatch, on the path
    below the folder and on the name) narrows what is taken. Collision when two files share a source_path."""
    allowed = {f".{extension.lower().lstrip('.')}" for extension in extensions}
    roots = resolve_roots(paths, prefixes)
    found = Found(roots=roots)
    taken: dict[str, Candidate] = {}
    for root in roots:
        if root.path.is_file():
            files: Iterator[tuple[Path, Root, _Stat]] = iter([(root.path, root, None)])
        else:
            files = _walk(root, roots, found)
        for path, home, stat in files:
            source_path = _source_path(path, home)
            relative = path.relative_to(home.path).as_posix() if path != home.path else path.name
            if pattern and not (fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(path.name, pattern)):
                continue
            if path.suffix.lower() not in allowed:
                if shown(source_path) not in found.unsupported:
                    found.unsupported.append(shown(source_path))
                continue
            if not (_is_utf8(source_path) and _is_utf8(path.name)):  # the title is the name
                found.problems.append(Problem(path, shown(source_path), "its name is not UTF-8, which the engine "
                                                                        "cannot store; rename it to load it"))
                continue
            earlier = taken.get(source_path)
            if earlier is not None:
                if earlier.path != path:
                    raise Collision("PATH", f"{earlier.path} and {path} would both be stored as {source_path}; "
                                            "nothing was written (give each PATH its own --prefix)")
                continue
            if stat is None:
                stat = _lstat(home.path, path)
            if isinstance(stat, FileNotFoundError):
                continue  # gone since the walk saw it
            if isinstance(stat, OSError):
                found.problems.append(Problem(path, shown(source_path), unreadable(stat)))
                continue
            taken[source_path] = Candidate(path, source_path, stat.st_size, home, stat.st_mtime_ns, stat.st_ino)
    found.candidates = sorted(taken.values(), key=lambda candidate: candidate.source_path)
    found.unsupported.sort()
    found.links.sort(key=lambda link: link.path)
    found.problems.sort(key=lambda problem: problem.source_path)
    return found


def _resolved_root(path: Path) -> Path:
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:
        raise InvalidArgument("PATH", f"{path} does not exist") from None
    except (OSError, RuntimeError):  # RuntimeError: a loop of links (Python before 3.13)
        raise InvalidArgument("PATH", f"{path} is a broken symbolic link or a loop of links") from None


# What lstat said of a file (or the error it raised); None: not asked yet.
_Stat = os.stat_result | OSError | None


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    is_link: bool
    is_dir: bool
    is_file: bool
    stat: _Stat  # a regular file's, asked in its open folder (one call, not a walk down from the root)


def _walk(root: Root, roots: Sequence[Root], found: Found) -> Iterator[tuple[Path, Root, _Stat]]:
    """(real path, its root, its lstat) of the regular files below the real folder `root`, links inside the
    roots followed; the links not followed go to `found.links`, the folders that cannot be listed to its
    problems."""
    walked: set[Path] = set()
    folders = [root.path]
    while folders:
        folder = folders.pop()
        if folder in walked:
            continue  # reached again through a link: once is enough
        walked.add(folder)
        home = _root_of(folder, root, roots) or root  # a folder is only ever reached inside a root
        try:
            entries = _listing(home.path, folder)
        except FileNotFoundError:
            continue  # gone since its parent was listed
        except OSError as exc:  # nothing of it is loaded, and --prune keeps what it holds (ingest_plan.py)
            found.problems.append(Problem(folder, shown(_source_path(folder, home)),
                                          f"cannot list the folder: {exc.strerror}; nothing in it is loaded, "
                                          "updated or pruned until it can be"))
            continue
        for entry in entries:
            path, is_dir, is_file, stat = folder / entry.name, entry.is_dir, entry.is_file, entry.stat
            if entry.is_link:
                target = _target_inside(path, root, roots, found.links)
                if target is None:
                    continue
                path, is_dir, is_file = target, target.is_dir(), target.is_file()  # real: no link left
            if is_dir:
                folders.append(path)
            elif is_file:
                file_root = _root_of(path, root, roots)
                if file_root is not None:
                    yield path, file_root, stat


def _listing(root: Path, folder: Path) -> list[_Entry]:
    """The entries of `folder` that are not hidden, sorted by name; what each is, is asked while the folder is
    open (an entry of a listing that gives no type is stat'ed in it)."""
    fd = ingest_paths.open_folder(root, folder)
    try:
        with os.scandir(fd) as listing:
            entries = []
            for entry in listing:
                if entry.name.startswith("."):
                    continue
                is_link, is_file = entry.is_symlink(), entry.is_file(follow_symlinks=False)
                entries.append(_Entry(entry.name, is_link, entry.is_dir(follow_symlinks=False), is_file,
                                      _lstat_entry(entry) if is_file and not is_link else None))
            return sorted(entries, key=lambda entry: entry.name)
    finally:
        os.close(fd)


def _lstat_entry(entry: os.DirEntry[str]) -> os.stat_result | OSError:
    try:
        return entry.stat(follow_symlinks=False)
    except OSError as exc:
        return exc


def _lstat(root: Path, path: Path) -> os.stat_result | OSError:
    try:
        return ingest_paths.lstat(root, path)
    except OSError as exc:
        return exc


def _target_inside(link: Path, root: Root, roots: Sequence[Root], links: list[SkippedLink]) -> Path | None:
    """The real path `link` resolves to when it lies inside the roots; else None, the link reported."""
    where = shown(_source_path(link, _root_of(link.parent, root, roots) or root))
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):  # missing target, or a loop of links
        links.append(SkippedLink(where, "a broken symbolic link or a loop of links"))
        return None
    if _root_of(target, root, roots) is None:
        links.append(SkippedLink(where, f"points outside the folders given (to {shown(str(target))})"))
        return None
    return target


def _root_of(path: Path, preferred: Root, roots: Sequence[Root]) -> Root | None:
    """The root `path` (real) lies in: `preferred` when it does, else the first given that does."""
    for root in (preferred, *roots):
        if path == root.path or root.path in path.parents:
            return root
    return None


def _source_path(path: Path, root: Root) -> str:
    relative = path.relative_to(root.path).as_posix()
    return root.prefix if relative == "." else f"{root.prefix}/{relative}"
