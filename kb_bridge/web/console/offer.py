"""What the console may run for a principal: only the tools the bridge offers agents (registry.select, the
very selection /mcp makes from KB_MCP_READ_ONLY and KB_MCP_TOOLS), and of those only the ones the
principal's scopes allow. A page's controls are shown only for usable tools; a request for any other is
FORBIDDEN before anything runs, whatever the form sent.
"""

from __future__ import annotations

from kb_bridge.auth.principal import Principal
from kb_bridge.errors import Forbidden
from kb_bridge.settings import McpSettings
from kb_bridge.tools import registry
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

# A console upload runs the three upload tools (so it is staged and limited as an agent's upload is).
UPLOAD_TOOLS = ("kb_upload_start", "kb_upload_chunk", "kb_upload_finish")


class ConsoleTools:
    def __init__(self, settings: McpSettings, available: tuple[ToolSpec, ...] = registry.ALL_TOOLS) -> None:
        self._offered = {spec.name: spec for spec in registry.select(settings, available)}
        self._specs = tuple(self._offered.values())

    def usable(self, principal: Principal, *names: str) -> bool:
        """Whether the bridge offers every one of these tools and the principal holds their scopes."""
        return all(name in self._offered and principal.can(self._offered[name].scope) for name in names)

    def require(self, principal: Principal, *names: str) -> None:
        """FORBIDDEN naming the first tool that the bridge does not offer or the principal may not use."""
        for name in names:
            spec = self._offered.get(name)
            if spec is None:
                raise Forbidden(f"this bridge does not offer {name} (KB_MCP_READ_ONLY or KB_MCP_TOOLS), "
                                "so neither does the console")
            if not principal.can(spec.scope):
                raise Forbidden(f"this token lacks the {spec.scope} scope that {name} needs", scope=spec.scope)

    def call(self, ctx: ToolContext, name: str, arguments: dict[str, object]) -> Result:
        """Run an offered tool for the principal, as /mcp runs it (FORBIDDEN when `require` says so)."""
        self.require(ctx.principal, name)
        return registry.call(ctx, name, arguments, self._specs)
