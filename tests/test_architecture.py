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


def _everywhere(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in the module: module level, `TYPE_CHECKING`, and inside functions."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def imports_of(name: str, path: Path, known: dict[str, Path], everywhere: bool = False) -> set[str]:
    """The kb_bridge modules `name` imports at module level, or anywhere with `everywhere` (a `from package
    import module` counts as the module; a `from package import name` as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    found = _everywhere if everywhere else _module_level
    for node in found(ast.parse(path.read_text())):
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
    # ... and the tests' MCP clients (testing/): test support, not part of the product or its wheel.
    assert offenders and all(o.startswith(("kb_bridge/protocol/", "kb_bridge/testing/")) for o in offenders), offenders


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph: its strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
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
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for name in graph:
        if name not in index:
            visit(name)
    return found


def test_no_import_circles() -> None:
    known = modules()
    assert circles({name: imports_of(name, path, known) for name, path in known.items()}) == []


def test_the_checker_finds_a_circle(tmp_path: Path) -> None:
    """The circle check itself works: two modules importing each other are reported."""
    (tmp_path / "a.py").write_text("from kb_bridge import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kb_bridge import a\n")
    known = {"kb_bridge.a": tmp_path / "a.py", "kb_bridge.b": tmp_path / "b.py"}
    assert imports_of("kb_bridge.a", known["kb_bridge.a"], known) == {"kb_bridge.b"}
    assert imports_of("kb_bridge.b", known["kb_bridge.b"], known) == {"kb_bridge.a"}


# The may-import table, asserted below and shown in docs/architecture.md: each unit of kb_bridge (a top-level
# folder or module) and the units it may import. Every import counts: module level, `TYPE_CHECKING` and inside
# functions. The package itself (`kb_bridge`, its version) may be imported by any unit.
LEAVES = ("errors", "redaction", "request_id", "asgi_messages", "allocator", "metrics", "digits", "json_values", "control_chars")
MAY_IMPORT: dict[str, set[str]] = {
    **{leaf: set() for leaf in LEAVES},
    "logs": {"control_chars", "redaction", "request_id"},
    "collection_tags": {"errors"},
    "credentials": {"collection_tags", "errors"},
    "environment": {"errors"},
    "settings": {"credentials", "environment", "errors"},
    "shapes": {"collection_tags", "errors"},
    "auth": {"asgi_messages", "collection_tags", "credentials", "environment", "errors", "settings"},
    "access_log": {"auth", "logs", "request_id"},
    "client": {"access_log", "errors", "metrics", "redaction", "settings"},
    "uploads": {"errors", "settings"},
    "tools": {"auth", "client", "collection_tags", "credentials", "errors", "json_values", "settings", "shapes", "uploads"},
    "content": {"auth", "client", "collection_tags", "digits", "errors", "shapes", "tools"},
    "runtime": {"client", "metrics", "redaction", "settings", "uploads"},
    "web": {"asgi_messages", "auth", "client", "collection_tags", "credentials", "digits", "errors", "runtime", "settings",
            "tools"},
    "protocol": {"access_log", "asgi_messages", "auth", "content", "credentials", "errors", "json_values", "runtime",
                 "settings", "tools", "web"},
    "serving": {"allocator", "errors", "logs", "metrics", "settings", "uploads"},
    "asgi": {"protocol"},
    # The local engine is a program of its own: it shares only log formatting, the environment reader, the
    # checks of a JSON body's values and the escaping of control characters.
    "local_engine": {"control_chars", "environment", "errors", "json_values", "logs"},
    # The command line sits on top; of the engine it reaches only its entry (checked below).
    "cli": {"auth", "client", "collection_tags", "control_chars", "credentials", "digits", "environment", "errors", "local_engine", "logs", "protocol", "serving",
            "settings", "shapes", "tools", "uploads"},
    "__main__": {"cli"},
    # The tests' and benchmarks' helpers (not in the wheel): processes, fakes of the engine and the settings
    # that point at them, and an engine run in the test's own process (testing/held_engine.py).
    "testing": {"local_engine", "settings"},
}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_imports(known: dict[str, Path]) -> dict[str, dict[str, set[str]]]:
    """unit → imported unit → the module-to-module imports behind that edge (every import, anywhere)."""
    edges: dict[str, dict[str, set[str]]] = {}
    for name, path in known.items():
        for target in imports_of(name, path, known, everywhere=True):
            source, imported = unit_of(name), unit_of(target)
            if source != imported:
                edges.setdefault(source, {}).setdefault(imported, set()).add(f"{name} -> {target}")
    return edges


def forbidden_imports(known: dict[str, Path], table: dict[str, set[str]]) -> list[str]:
    """Imports the table does not allow, and units it does not list."""
    units = {unit_of(name) for name in known} - {"kb_bridge"}
    found = [f"{unit}: not in the may-import table" for unit in sorted(units - set(table))]
    for source, targets in sorted(unit_imports(known).items()):
        for imported, where in sorted(targets.items()):
            if imported != "kb_bridge" and imported not in table.get(source, set()):
                found.extend(sorted(where))
    return found


def test_every_import_follows_the_may_import_table() -> None:
    assert forbidden_imports(modules(), MAY_IMPORT) == []


def test_the_may_import_table_has_no_loop_and_nothing_runs_back_up() -> None:
    known = modules()
    assert circles({unit: set(targets) - {"kb_bridge"} for unit, targets in unit_imports(known).items()}) == []
    assert circles(MAY_IMPORT) == []


def documented_table() -> dict[str, set[str]]:
    """docs/architecture.md's bridge table: each row's unit (`name.py` or `name/`) and its may-import column."""
    text = (REPO / "docs" / "architecture.md").read_text().split("## The bridge", 1)[1].split("\n## ", 1)[0]
    table = {}
    for first, _owns, allowed in re.findall(r"^\| `([\w.]+?)(?:\.py|/)` \| (.+) \| (.+?) \|$", text, re.M):
        table[first] = set(re.findall(r"`(\w+)`", allowed))
    return table


def test_docs_architecture_shows_the_same_may_import_table() -> None:
    assert documented_table() == MAY_IMPORT


def test_a_bad_import_fails_the_table_check(tmp_path: Path) -> None:
    """The check itself works: settings importing auth (even inside a function), an unlisted folder, and an
    allowed import are told apart."""
    (tmp_path / "settings.py").write_text("def late():\n    from kb_bridge.auth import bearer\n")
    (tmp_path / "bearer.py").write_text("from kb_bridge import settings\n")
    (tmp_path / "stray.py").write_text("")
    known = {"kb_bridge.settings": tmp_path / "settings.py", "kb_bridge.auth.bearer": tmp_path / "bearer.py",
             "kb_bridge.stray": tmp_path / "stray.py"}
    assert forbidden_imports(known, MAY_IMPORT) == [
        "stray: not in the may-import table", "kb_bridge.settings -> kb_bridge.auth.bearer"]


def test_only_the_engine_entry_of_the_command_line_imports_the_local_engine() -> None:
    """Of the product: test support (testing/) may run the engine in the test's own process."""
    known = modules()
    importers = {
        name for name, path in known.items() if not name.startswith(("kb_bridge.local_engine", "kb_bridge.testing"))
        and any(t.startswith("kb_bridge.local_engine") for t in imports_of(name, path, known, everywhere=True))
    }
    assert importers == {"kb_bridge.cli"}


def test_the_engine_process_loads_no_bridge_settings_or_auth() -> None:
    code = ("import sys, kb_bridge.local_engine.server, kb_bridge.local_engine.cli, kb_bridge.local_engine.app\n"
            "print(sorted(m for m in sys.modules if m.startswith('kb_bridge') and not m.startswith('kb_bridge.local_engine')))")
    env = {"PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert loaded and {unit_of(m) for m in loaded} <= {"kb_bridge", *MAY_IMPORT["local_engine"], *MAY_IMPORT["logs"]}
    assert not {"settings", "auth", "credentials", "access_log"} & {unit_of(m) for m in loaded}


def test_no_console_function_is_over_60_lines() -> None:
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in (PACKAGE / "web" / "console").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (node.end_lineno or 0) - node.lineno + 1 > 60
    ]
    assert long == []


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
