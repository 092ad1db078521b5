"""The protocol layer: the only package that imports `mcp`.

Everything else speaks plain Python (typed arguments in, plain data or `KbError` out); this package turns
that into MCP: the low-level server and its tool dispatch (server.py), tool declarations and results
(results.py), resources/prompts/completions (content.py), the ASGI app with the Streamable HTTP
transport (app.py) and the stdio transport (stdio.py).
"""
