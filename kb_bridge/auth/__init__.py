"""Who may call /mcp and as whom: the principal of a request (principal.py) and the ways to prove it
(bearer.py: the static keys of KB_MCP_API_KEY)."""
