"""The embedding model: the Embedder interface, the bundled all-MiniLM-L6-v2 and its loader (embedder.py),
and how queries are embedded (query_model.py)."""
