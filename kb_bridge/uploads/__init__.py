"""Chunked-upload staging: a store interface, its directory and Redis implementations, the sweeper."""
