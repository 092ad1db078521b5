"""The bridge's side of the engine HTTP contract (docs/engine-api.md): the client (engine.py), its retry
policy (retry.py) and the engine-version rule (versions.py)."""
