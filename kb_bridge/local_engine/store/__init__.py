"""Where the engine keeps everything: the Store interface (base.py), its backends (sqlite/), and the choice
between them (backends.py: `open_store(config)`; nothing else names a backend)."""
