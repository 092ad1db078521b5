"""What a person sees of a principal: a name they recognise, never the digest kept for logs."""

from __future__ import annotations

import pytest

from kb_bridge.auth.principal import ANONYMOUS, LOCAL, Principal, caller_id
from kb_bridge.credentials.secret import Secret


@pytest.mark.parametrize(("principal", "shown"), [
    (Principal(caller_id(Secret("bridge-key-0123456789abcdef"))), "API key"),
    (Principal("ci-reader", kind="token"), "ci-reader"),
    (Principal("user-7@example.org", kind="oauth"), "user-7@example.org"),
    (LOCAL, "local user"),
    (ANONYMOUS, "anonymous"),
])
def test_the_display_name_is_the_tokens_name_the_subject_or_api_key(principal: Principal, shown: str) -> None:
    assert principal.display_name == shown
