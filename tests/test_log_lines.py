"""What a log line may carry from a client: the access line's path, redacted of every secret the process
knows however the line's encoding writes it (logs.py)."""

from __future__ import annotations

import json
import logging

import pytest

from kb_bridge import logs
from kb_bridge.redaction import Redactor

SECRET = "engine-key-SECRET-0123456789abcdef"


def access_record(path: str) -> logging.LogRecord:
    record = logging.LogRecord(logs.ACCESS_LOGGER, logging.INFO, __file__, 1, "http_request", None, None)
    record.fields = {"event": "http_request", "method": "GET", "path": path, "status": 404}  # type: ignore[attr-defined]
    return record


# Each of these is written as an escape by the line's JSON, so the raw path is not in the encoded line.
PATHS = [f"/{SECRET}\n", f"/\u00e9{SECRET}", f'/{SECRET}"', f"/\x1b[31m{SECRET}", f"/{SECRET}\\"]


@pytest.mark.parametrize("formatter", [logs.JsonFormatter, logs.TextFormatter])
@pytest.mark.parametrize("path", PATHS)
def test_a_secret_in_a_request_path_is_redacted_whatever_the_encoding_makes_of_the_path(
        monkeypatch: pytest.MonkeyPatch, formatter: type[logging.Formatter], path: str) -> None:
    monkeypatch.setattr(logs, "_redact", Redactor([SECRET]))
    line = formatter().format(access_record(path))
    assert "SECRET-0123" not in line and "***" in line, line
    if formatter is logs.JsonFormatter:
        assert json.loads(line)["path"].endswith(path[path.index(SECRET) + len(SECRET):])  # the rest is kept


def test_an_access_path_without_a_secret_is_written_as_it_came(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_redact", Redactor([SECRET]))
    path = "/ui/documents/12\n\u00e9"
    assert json.loads(logs.JsonFormatter().format(access_record(path)))["path"] == path


def test_a_plain_text_line_keeps_what_a_client_sent_on_it_and_out_of_the_terminal() -> None:
    """KB_LOG_JSON=false: a newline in a logged value (a User-Agent in the engine's access lines, a token's
    subject) began a forged line; ESC and U+009B (CSI) reached a terminal showing the log."""
    sent = "agent\n2026-11-28 02:00:00,000 CRITICAL kb_bridge.auth: FORGED\x1b[2J\x9b31m\ttab"
    record = logging.LogRecord("gunicorn.access", logging.INFO, __file__, 1, "client said %s", (sent,), None)
    line = logs.TextFormatter().format(record)
    assert "\n" not in line and "\x1b" not in line and "\x9b" not in line, line
    assert line.endswith("client said agent\\x0a2026-11-28 02:00:00,000 CRITICAL kb_bridge.auth: FORGED"
                         "\\x1b[2J\\x9b31m\ttab")


def test_a_plain_text_traceback_still_follows_on_lines_of_its_own() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        record = logging.LogRecord("kb", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    lines = logs.TextFormatter().format(record).splitlines()
    assert lines[0].endswith("kb: failed") and lines[1].startswith("Traceback") and lines[-1] == "ValueError: boom"


JWT = ("eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJhZ2VudCIsImF1ZCI6Imh0dHA6Ly8xMjcuMC4wLjEvbWNwIn0"
       ".c2lnbmF0dXJlLW9mLXRoZS1pc3N1ZXI")


@pytest.mark.parametrize("formatter", [logs.JsonFormatter, logs.TextFormatter])
@pytest.mark.parametrize("token", [JWT, "Xq3vN0c_f8-Lm2PzR7tYk4aWbE1sDg9hJ5uC6oIeQnA"], ids=["JWT", "named token"])
def test_a_token_the_bridge_knows_only_by_digest_is_written_as_stars_in_a_request_path(
        formatter: type[logging.Formatter], token: str) -> None:
    """A JWT or a named token pasted into a URL: the bridge keeps only the issuer's keys or the token's digest, so
    it cannot look for the value as it does for its own keys; a path segment shaped as one is written as stars."""
    line = formatter().format(access_record(f"/mcp/{token}/x"))
    assert token[8:40] not in line and "/mcp/***/x" in line, line


@pytest.mark.parametrize("path", ["/console/collections/customer-support-knowledge-base-2026-archive",
                                  "/console/documents/12345678901234567890123456789012345",
                                  "/.well-known/oauth-protected-resource/mcp", "/console/tags"])
def test_a_path_of_the_bridges_own_is_written_as_it_came(path: str) -> None:
    assert json.loads(logs.JsonFormatter().format(access_record(path)))["path"] == path
