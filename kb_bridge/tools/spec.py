"""What a tool is: one declaration (name, description, argument model, output schema, hints, handler,
rendering).

The MCP layer, the README's tool table and the tests all read the same `ToolSpec` list, so a tool is
defined exactly once. Handlers are plain synchronous functions of `(ToolContext, arguments model) ->
structured result`; they raise `KbError` for failures the agent should see, and never touch MCP types.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kb_bridge.auth.principal import LOCAL, Principal
from kb_bridge.credentials.scopes import DELETE, READ, WRITE
from kb_bridge.tools.arguments import ArgumentParser

if TYPE_CHECKING:
    from kb_bridge.client.engine import EngineClient
    from kb_bridge.settings import Settings
    from kb_bridge.uploads.store import UploadStore

Result = dict[str, Any]
ProgressFn = Callable[[float, float | None, str | None], None]


def no_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
    """Progress sink for calls whose client sent no progress token."""


class SharedLocks(Protocol):
    def lock(self, name: str, timeout: float) -> AbstractContextManager[None]: ...


@dataclass
class ToolContext:
    """Everything a handler may use for one call."""

    engine: EngineClient
    uploads: UploadStore
    settings: Settings
    principal: Principal = LOCAL
    progress: ProgressFn = no_progress

    @property
    def locks(self) -> SharedLocks:
        """Named locks every worker and replica respects (e.g. a document's move). The upload store lends
        them: it is the bridge's one piece of state shared between workers."""
        return self.uploads


Handler = Callable[[ToolContext, Any], Result]
Renderer = Callable[[Result], str]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments: type  # the typed model of the tool's arguments (tools/arguments.py)
    output_schema: dict[str, Any]
    handler: Handler
    render: Renderer
    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    # The OAuth scope a call needs (kb:read, kb:write or kb:delete); by default read for a read-only
    # tool, delete for a destructive one, write otherwise.
    scope: str = ""
    _parser: ArgumentParser[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built once per tool: the schema compiles once, and tools/list is a constant answer.
        object.__setattr__(self, "_parser", ArgumentParser(self.arguments))
        if not self.scope:
            object.__setattr__(self, "scope", READ if self.read_only else DELETE if self.destructive else WRITE)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The full schema every call is validated against."""
        return self._parser.schema

    @property
    def advertised_input_schema(self) -> dict[str, Any]:
        """The lean schema tools/list publishes (tools/arguments.py, `advertised_schema`)."""
        return self._parser.advertised

    def parse(self, raw: Any) -> Any:
        """The arguments model for a raw arguments object, or InvalidArgument naming the field."""
        return self._parser.parse(raw)
