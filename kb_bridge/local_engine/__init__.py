"""The local kb engine: an implementation of the kb engine HTTP API (docs/engine.md).

A self-contained subpackage: it imports no other kb_bridge module, and bridge modules never import it.
Importing it does no work; `app.create_app(config)` builds everything.
"""
