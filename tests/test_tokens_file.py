"""KB_MCP_TOKENS_FILE: what a good file gives, how each bad entry is named, and `kb-bridge token new`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kb_bridge.auth.bearer import StaticKeys
from kb_bridge.credentials.named_tokens import load_tokens_file
from kb_bridge.cli import main
from kb_bridge.errors import SettingsError
from kb_bridge.settings import load_settings

DIGEST = "ab" * 32


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    path.chmod(0o600)  # whatever the umask: a file others can write is refused
    return str(path)


def test_a_good_file_gives_named_principals_with_scopes_and_collections(tmp_path: Path) -> None:
    token = "a-token-for-the-research-agent-0123456789"
    path = write(tmp_path, f"""
[[token]]
name = "research"
sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"
scopes = ["kb:read"]
collections = ["documents"]

[[token]]
name = "memory-writer"
sha256 = "{DIGEST}"
scopes = ["kb:read", "kb:write"]
""")
    settings = load_settings({"KB_MCP_TOKENS_FILE": path})
    assert [t.name for t in settings.mcp.named_tokens] == ["research", "memory-writer"]
    assert settings.mcp.auth_enabled
    principal = StaticKeys((), settings.mcp.named_tokens).principal(token.encode())
    assert principal is not None
    assert (principal.name, principal.kind) == ("research", "token")
    assert principal.scopes == frozenset({"kb:read"}) and principal.collections == frozenset({"documents"})
    assert StaticKeys((), settings.mcp.named_tokens).principal(b"another-token-0123456789") is None
    assert settings.mcp.named_tokens[1].collections is None


@pytest.mark.parametrize(("entry", "problem"), [
    ('name = "x y"\nsha256 = "{d}"\nscopes = ["kb:read"]', "name must be"),
    ('name = "a"\nsha256 = "123"\nscopes = ["kb:read"]', "sha256 must be"),
    ('name = "a"\nsha256 = "{d}"\nscopes = []', "scopes must be a non-empty list"),
    ('name = "a"\nsha256 = "{d}"\nscopes = ["kb:admin"]', "unknown scope 'kb:admin'"),
    ('name = "a"\nsha256 = "{d}"\nscopes = ["kb:read"]\ncollections = ["Bad Name"]', "is not a collection name"),
    ('name = "a"\nsha256 = "{d}"\nscopes = ["kb:read"]\ncollections = []', "collections must be a non-empty list"),
    ('name = "a"\nsha256 = "{d}"\nscopes = ["kb:read"]\ntoken = "the-token-itself"', "unknown key(s) token"),
])
def test_a_bad_entry_is_named(tmp_path: Path, entry: str, problem: str) -> None:
    good = f'[[token]]\nname = "good"\nsha256 = "{"cd" * 32}"\nscopes = ["kb:read"]\n\n'
    path = write(tmp_path, good + "[[token]]\n" + entry.replace("{d}", DIGEST) + "\n")
    with pytest.raises(SettingsError) as caught:
        load_settings({"KB_MCP_TOKENS_FILE": path})
    message = str(caught.value)
    assert message.startswith("KB_MCP_TOKENS_FILE: token #2")
    assert problem in message


def test_duplicates_and_files_that_are_not_toml_are_refused(tmp_path: Path) -> None:
    entry = f'[[token]]\nname = "twice"\nsha256 = "{DIGEST}"\nscopes = ["kb:read"]\n'
    with pytest.raises(SettingsError, match="token #2 .*used by an earlier entry"):
        load_tokens_file_via_settings(write(tmp_path, entry + "\n" + entry))
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_tokens_file_via_settings(write(tmp_path, "[[token]\n"))
    with pytest.raises(SettingsError, match="no such file"):
        load_tokens_file_via_settings(str(tmp_path / "missing.toml"))


def load_tokens_file_via_settings(path: str) -> None:
    load_settings({"KB_MCP_TOKENS_FILE": path})


def test_the_mode_that_counts_is_the_files_own_even_through_a_symlink(tmp_path: Path) -> None:
    path = Path(write(tmp_path, f'[[token]]\nname = "one"\nsha256 = "{DIGEST}"\nscopes = ["kb:read"]\n'))
    link = tmp_path / "link.toml"
    link.symlink_to(path)  # a link's own mode is always 0777: only the file's counts
    assert len(load_settings({"KB_MCP_TOKENS_FILE": str(link)}).mcp.named_tokens) == 1
    path.chmod(0o660)
    with pytest.raises(SettingsError, match=r"^KB_MCP_TOKENS_FILE: .*writable by group or others \(mode 0660\)"):
        load_tokens_file_via_settings(str(link))


def test_token_new_prints_a_token_and_the_entry_that_accepts_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "new", "research", "--scopes", "kb:read,kb:write", "--collections", "memory,notes"]) == 0
    out = capsys.readouterr().out
    token, _, entry = out.partition("\n\n")
    assert token not in entry  # the file never holds the token
    tokens = load_tokens_file(write(tmp_path, entry))
    principal = StaticKeys((), tokens).principal(token.encode())
    assert principal is not None and principal.name == "research"
    assert principal.scopes == frozenset({"kb:read", "kb:write"})
    assert principal.collections == frozenset({"memory", "notes"})


def test_token_new_json_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "new", "ci", "--scopes", "kb:read", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["sha256"] == hashlib.sha256(printed["token"].encode()).hexdigest()
    assert printed["collections"] is None and "[[token]]" in printed["toml"]
    assert main(["token", "new", "ci", "--scopes", "kb:everything"]) == 2
    assert "unknown scope" in capsys.readouterr().err
    assert main(["token", "new", "no spaces", "--scopes", "kb:read"]) == 2


def test_plain_token_still_prints_one_random_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token"]) == 0
    out = capsys.readouterr().out.strip()
    assert len(out) >= 40 and "\n" not in out
