"""kb-bridge: an MCP server that bridges AI agents to a kb engine's HTTP API."""

__version__ = "0.1.0"
