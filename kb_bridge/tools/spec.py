"""What a tool is: one declaration (name, description, schemas, hints, handler, rendering).

The MCP layer, the README's tool table and the tests all read the same `ToolSpec` list, so a
tool is defined exactly once. Handlers are plain synchronous functions of
`(ToolContext, arguments) -> structured result`; they raise `KbError` for failures the agent
should see, and never touch MCP types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kb_bridge.engine_client import EngineClient
    from kb_bridge.settings import Settings
    from kb_bridge.uploads.store import UploadStore

Arguments = dict[str, Any]
Result = dict[str, Any]
ProgressFn = Callable[[float, float | None, str | None], None]


def no_progress(progress: float, total: float | None = None, message: str | None = None) -> None:
    """Progress sink for calls whose client sent no progress token."""


@dataclass
class ToolContext:
    """Everything a handler may use for one call."""

    engine: EngineClient
    uploads: UploadStore
    settings: Settings
    caller: str  # a stable, non-secret id of the token that made the call
    progress: ProgressFn = no_progress


Handler = Callable[[ToolContext, Arguments], Result]
Renderer = Callable[[Result], str]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    handler: Handler
    render: Renderer
    read_only: bool
    destructive: bool = False
    idempotent: bool = False
