"""Who may call /mcp and as whom: the principal of a request (principal.py) and the ways to prove it
(bearer.py: the door, with the static keys of KB_MCP_API_KEY and the named tokens of KB_MCP_TOKENS_FILE;
oauth.py: JWTs). What a credential is (secrets, scope names, the tokens file format) is kb_bridge/credentials/,
below both this package and settings."""
