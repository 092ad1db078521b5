"""The upload store this configuration asks for: the staging directory, or Redis (KB_UPLOAD_STORE)."""

from __future__ import annotations

from kb_bridge.settings import Settings
from kb_bridge.uploads.directory import DirectoryStore, check_root
from kb_bridge.uploads.store import UploadStore


def check_staging(settings: Settings) -> None:
    """At start: the staging directory exists, 0700, and no one else can write to it (SettingsError naming
    KB_UPLOAD_DIR otherwise). Nothing to check when uploads are staged in Redis."""
    if settings.uploads.store_url is None:
        check_root(settings.uploads.dir)


def make_upload_store(settings: Settings) -> UploadStore:
    if settings.uploads.store_url is not None:
        from kb_bridge.uploads.redis_store import RedisStore  # optional extra: imported only when configured

        return RedisStore.from_url(settings.uploads.store_url, settings.uploads.ttl_seconds)
    return DirectoryStore(settings.uploads.dir)
