"""Chunked uploads, all of it: the upload tools (tools.py), the staging store interface (store.py) and
its directory and Redis implementations, the expiry sweeper, safe names and ids, and the multipart body
that streams a finished upload to the engine."""
