"""The console's one blueprint and what its views share: the Console the app holds (the bridge, the
authenticator, the sessions and the tool offer, set once by register in __init__.py), the principal of the
request's session, and tool calls run as /mcp runs them.

Every view module registers on `blueprint`, so endpoint names stay `console.<view>` (the templates'
url_for calls name them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, abort, current_app, g, request

from kb_bridge.auth.bearer import Authenticator
from kb_bridge.auth.principal import Principal
from kb_bridge.digits import ascii_number
from kb_bridge.runtime import Bridge
from kb_bridge.tools.arguments import LARGEST_ID
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec
from kb_bridge.web.console import PREFIX
from kb_bridge.web.console.offer import ConsoleTools
from kb_bridge.web.console.sessions import Session, Sessions

EXTENSION = "kb_console"

blueprint = Blueprint("console", "kb_bridge.web.console", url_prefix=PREFIX, template_folder="templates",
                      static_folder="static")


@dataclass(frozen=True)
class Console:
    bridge: Bridge
    authenticator: Authenticator
    sessions: Sessions
    tools: ConsoleTools
    # Cookies are Secure behind a TLS-terminating proxy too, known by KB_OAUTH_PUBLIC_URL.
    secure_public: bool

    @classmethod
    def build(cls, bridge: Bridge, authenticator: Authenticator, available: tuple[ToolSpec, ...]) -> Console:
        """The console for this bridge; `available` is the tool set /mcp selects from (the same selection)."""
        return cls(bridge=bridge, authenticator=authenticator, sessions=Sessions.for_settings(bridge.settings),
                   tools=ConsoleTools(bridge.settings.mcp, available),
                   secure_public=(bridge.settings.mcp.oauth.public_url or "").startswith("https://"))


def current_console() -> Console:
    console: Console = current_app.extensions[EXTENSION]
    return console


def principal() -> Principal:
    session: Session = g.session
    return session.principal


def usable(*names: str) -> bool:
    return current_console().tools.usable(principal(), *names)


def require(*names: str) -> None:
    current_console().tools.require(principal(), *names)


def call(tool: str, arguments: dict[str, Any]) -> Result:
    """Run an offered tool as the session's principal, within the engine call deadline."""
    console = current_console()
    bridge = console.bridge
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=principal())
    with ctx.engine.deadline(bridge.settings.engine.call_deadline()):
        return console.tools.call(ctx, tool, arguments)


def secure() -> bool:
    return request.is_secure or current_console().secure_public


# The most a whole number from a form or query string may be: an id or version never passes the tools' largest
# id, and 16 digits hold it.
LARGEST = LARGEST_ID
_MOST_DIGITS = len(str(LARGEST))
# What a note's forms answer when the version they loaded comes back wrong.
LOST_VERSION = "the form lost the version it loaded; reload the page"


def whole_number(text: str, problem: str, maximum: int = LARGEST) -> int:
    """`text` as a number from 1 to `maximum`, else 400 saying `problem` (the console's error page). ASCII
    digits only and few of them: "²".isdigit() is true though int() refuses it, and int() refuses more than
    4300 digits; either would otherwise be a 500."""
    number = ascii_number(text, _MOST_DIGITS)
    if number is None or not 1 <= number <= maximum:
        abort(400, problem)
    return number


def wants_json() -> bool:
    return request.accept_mimetypes.best == "application/json"
