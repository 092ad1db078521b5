"""HTTP beside the MCP transport: the Flask operational endpoints (ops.py) and the Host/Origin guard
in front of /mcp (guard.py)."""
