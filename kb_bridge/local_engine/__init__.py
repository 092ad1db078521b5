"""The local kb engine: an implementation of the kb engine HTTP API (docs/engine.md).

A self-contained subpackage: of the rest of kb_bridge it imports only the log formatting (kb_bridge.logs,
so that KB_LOG_JSON governs both programs), and bridge modules never import it.
Importing it does no work; `app.create_app(config)` builds everything.
"""
