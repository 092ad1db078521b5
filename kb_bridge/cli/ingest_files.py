"""Which files `kb-bridge ingest PATH...` loads, and under which `source_path`.

The roots are the paths given on the command line, each resolved first: a root that is a symbolic link
counts as what it points to (its name included). Below a folder root:

- hidden entries (a name starting with '.') are left out;
- only regular files are taken (not sockets, pipes or devices);
- a symbolic link is followed only when what it resolves to lies inside one of the roots. It then stands
  for its target: the target is loaded once, under the target's own path, whatever the number of links
  to it (so a link inside the folder never makes a second document). A folder reached through a link is
  walked once; a link back up the tree is not walked again.
- a link that resolves outside every root (a link to ~/.aws/credentials, to /etc), that is broken, or that
  loops, is skipped and reported: loading a folder never reads a file the user did not hand over.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from kb_bridge.errors import InvalidArgument


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A file to ingest: its real path (no link in it) and the path it is stored under."""

    path: Path
    source_path: str
    size: int


@dataclasses.dataclass(frozen=True)
class SkippedLink:
    """A symbolic link that was not followed: where it is (as a source_path would say) and why."""

    path: str
    reason: str


@dataclasses.dataclass
class Found:
    candidates: list[Candidate] = dataclasses.field(default_factory=list)
    unsupported: list[str] = dataclasses.field(default_factory=list)  # source paths left out for their type
    links: list[SkippedLink] = dataclasses.field(default_factory=list)


def find_files(paths: Sequence[Path], pattern: str | None, extensions: Iterable[str]) -> Found:
    """The files to ingest, in a stable order. A folder is walked below it; `pattern` (fnmatch, on the path
    below the folder and on the name) narrows what is taken."""
    allowed = {f".{extension.lower().lstrip('.')}" for extension in extensions}
    roots = [_resolved_root(path) for path in paths]
    found = Found()
    taken: dict[str, Candidate] = {}
    for root in roots:
        if root.is_file():
            files: Iterator[tuple[Path, str]] = iter([(root, root.name)])
        else:
            files = _walk(root, roots, found.links)
        for path, source_path in files:
            relative = source_path.split("/", 1)[-1]
            if pattern and not (fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(path.name, pattern)):
                continue
            if path.suffix.lower() not in allowed:
                if source_path not in found.unsupported:
                    found.unsupported.append(source_path)
                continue
            if source_path not in taken:
                try:
                    size = path.stat().st_size
                except OSError:
                    continue  # gone since the walk saw it
                taken[source_path] = Candidate(path, source_path, size)
    found.candidates = sorted(taken.values(), key=lambda candidate: candidate.source_path)
    found.unsupported.sort()
    found.links.sort(key=lambda link: link.path)
    return found


def _resolved_root(path: Path) -> Path:
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:
        raise InvalidArgument("PATH", f"{path} does not exist") from None
    except (OSError, RuntimeError):  # RuntimeError: a loop of links (Python before 3.13)
        raise InvalidArgument("PATH", f"{path} is a broken symbolic link or a loop of links") from None


def _walk(root: Path, roots: Sequence[Path], links: list[SkippedLink]) -> Iterator[tuple[Path, str]]:
    """(real path, source_path) of the regular files below the real folder `root`, links inside the roots
    followed; the links not followed go to `links`."""
    walked: set[Path] = set()
    folders = [root]
    while folders:
        folder = folders.pop()
        if folder in walked:
            continue  # reached again through a link: once is enough
        walked.add(folder)
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue  # unreadable: nothing of it is loaded
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                target = _target_inside(Path(entry.path), root, roots, links)
                if target is None:
                    continue
                path, is_dir, is_file = target, target.is_dir(), target.is_file()  # real: no link left
            else:
                path = Path(entry.path)
                is_dir, is_file = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
            if is_dir:
                folders.append(path)
            elif is_file:
                home = _root_of(path, root, roots)
                if home is not None:
                    yield path, _source_path(path, home)


def _target_inside(link: Path, root: Path, roots: Sequence[Path], links: list[SkippedLink]) -> Path | None:
    """The real path `link` resolves to when it lies inside the roots; else None, the link reported."""
    where = _source_path(link, _root_of(link.parent, root, roots) or root)
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):  # missing target, or a loop of links
        links.append(SkippedLink(where, "a broken symbolic link or a loop of links"))
        return None
    if _root_of(target, root, roots) is None:
        links.append(SkippedLink(where, f"points outside the folders given (to {target})"))
        return None
    return target


def _root_of(path: Path, preferred: Path, roots: Sequence[Path]) -> Path | None:
    """The root `path` (real) lies in: `preferred` when it does, else the first given that does."""
    for root in (preferred, *roots):
        if path == root or root in path.parents:
            return root
    return None


def _source_path(path: Path, root: Path) -> str:
    relative = path.relative_to(root).as_posix()
    name = root.name or "root"
    return name if relative == "." else f"{name}/{relative}"
