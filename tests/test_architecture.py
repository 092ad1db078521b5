"""The shape of the code, checked: protocol/ is the only importer of mcp, no import circles, no work at
import time, no sys.path edits, and the README's error-code table says exactly what the code raises."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kb_bridge import errors

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kb_bridge"


def modules() -> dict[str, Path]:
    """Every kb_bridge module by dotted name (a package by its own name, from its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _module_level(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: top level, inside `if TYPE_CHECKING:` and other
    top-level blocks (try/if), never inside functions or classes' methods."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try)):
            pending.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The kb_bridge modules `name` imports at module level (a `from package import module` counts as the
    module; a `from package import name` as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _module_level(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            targets.add(candidate if candidate in known else base)
    return {t for t in targets if t in known and t != name}


def test_only_protocol_imports_mcp() -> None:
    pattern = re.compile(r"^\s*(from|import) mcp", re.M)
    offenders = sorted(str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text()))
    assert offenders and all(o.startswith("kb_bridge/protocol/") for o in offenders), offenders


def test_no_import_circles() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for name in graph:
        if name not in index:
            visit(name)
    assert circles == []


def test_the_checker_finds_a_circle(tmp_path: Path) -> None:
    """The circle check itself works: two modules importing each other are reported."""
    (tmp_path / "a.py").write_text("from kb_bridge import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kb_bridge import a\n")
    known = {"kb_bridge.a": tmp_path / "a.py", "kb_bridge.b": tmp_path / "b.py"}
    assert imports_of("kb_bridge.a", known["kb_bridge.a"], known) == {"kb_bridge.b"}
    assert imports_of("kb_bridge.b", known["kb_bridge.b"], known) == {"kb_bridge.a"}


def test_nothing_happens_at_import_time() -> None:
    """Every module imports under a configuration that could not load: none reads settings (or builds
    anything) when imported. asgi.py is the one documented exception (gunicorn's target); __main__ modules
    run their command."""
    names = [n for n in modules() if not n.endswith(("__main__", ".asgi"))]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    env = {"KB_BIND": "not-a-bind", "KB_WORKERS": "many", "KB_ENGINE_URL": "ftp://x", "PATH": "/usr/bin:/bin",
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    done = subprocess.run([sys.executable, "-c", code, *names], env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]


def test_no_sys_path_edits_in_tests_bench_or_ci() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for folder in ("tests", "bench", ".ci")
        for p in (REPO / folder).rglob("*.py")
        if "node_modules" not in p.parts and "sys.path" in p.read_text()
    ]
    assert offenders == [str(Path(__file__).relative_to(REPO))]  # this file only names it


def raised_codes() -> set[str]:
    found: set[str] = set()
    pending: list[type[errors.KbError]] = [errors.KbError]
    while pending:
        cls = pending.pop()
        found.add(cls.code)
        pending.extend(cls.__subclasses__())
    return found


def readme_codes() -> set[str]:
    """The codes in the README's error-code table (rows of "| `CODE` | ... |" under "Error codes")."""
    text = (REPO / "README.md").read_text()
    section = text.split("### Error codes", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\|\s*`([A-Z_]+)`\s*\|", section, re.M))


def test_the_readme_error_table_lists_exactly_the_codes_the_code_raises() -> None:
    assert readme_codes() == raised_codes()
    assert {"STORAGE_ERROR", "INGESTION_FAILED"} <= readme_codes()


DOCS = [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").glob("*.md"))]
# Where a path in the docs may be relative to: the repository, the bridge package, the engine package.
ROOTS = [REPO, REPO / "kb_bridge", REPO / "kb_bridge" / "local_engine"]
_PATH = re.compile(r"^[\w.-]+(/[\w.-]+)+\.(py|md|yml|yaml|toml|cfg|json|mjs|png|txt|lock|sh)$")


def referenced_paths(doc: Path) -> Iterator[str]:
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):  # markdown links
        if not target.startswith(("http://", "https://", "#", "mailto:")):
            yield str((doc.parent / target.split("#", 1)[0]).resolve().relative_to(REPO))
    for code in re.findall(r"`([^`\s]+)`", text):  # backticked paths of files (a bare name is read in context)
        if _PATH.match(code) and not code.startswith("DATA/"):
            yield code


def test_the_docs_point_only_at_files_in_the_repository() -> None:
    missing = sorted(
        f"{doc.relative_to(REPO)}: {path}"
        for doc in DOCS
        for path in referenced_paths(doc)
        if not any((root / path).exists() for root in ROOTS)
    )
    assert missing == []
    assert not [doc.name for doc in DOCS if "../shared" in doc.read_text()]
