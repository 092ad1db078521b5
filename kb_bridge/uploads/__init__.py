"""Staging chunked uploads: the store interface (store.py) and its directory and Redis implementations,
the expiry sweeper, safe names and ids, and the multipart body that streams a finished upload to the
engine. The upload tools that drive it are tools/uploads.py; nothing here imports `tools`."""
