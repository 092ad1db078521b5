"""The engine API held to what docs/engine-api.md writes, where an earlier suite left it unpinned: the order
of tags on a PostgreSQL database of a linguistic collation, and the limits, codes and fields the document
names (every test but the locale one runs on both stores)."""

from __future__ import annotations

import os
from collections.abc import Callable

import flask
import psycopg
import pytest

from kb_bridge.testing.engine_app import API, add_note
from kb_bridge.testing.postgres import PostgresServer

# The official PostgreSQL image makes its databases in this locale (tests/engine/test_engine_context.py).
LINGUISTIC_LOCALE = "en_US.UTF-8"
TAGS = ["collectionb", "collection:z", "B", "a", "Éclair", "e"]


def test_tags_are_listed_in_code_point_order_on_a_database_of_a_linguistic_collation(
    make_app: Callable[..., flask.Flask], postgres_server: PostgresServer
) -> None:
    """A document's `tags` and GET /tags come "by name" in code points, as SQLite sorts them: PostgreSQL sorted
    them by the database's collation, so in en_US.UTF-8 "a" came before "B" and "collectionb" before
    "collection:z", and the same documents listed their tags in another order on each store."""
    try:
        url = postgres_server.new_database(locale=LINGUISTIC_LOCALE)
    except psycopg.Error as error:  # the machine lacks the locale
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail(f"the locale {LINGUISTIC_LOCALE} is required (Debian: locales, locale-gen): {error}")
        pytest.skip(f"this machine has no {LINGUISTIC_LOCALE} locale: {error}")
    client = make_app(database_url=url).test_client()
    document = add_note(client, "tags in order", tags=TAGS)
    in_code_points = sorted(TAGS)
    assert document["tags"] == in_code_points
    assert client.get(f"{API}/documents").json["documents"][0]["tags"] == in_code_points
    assert [tag["name"] for tag in client.get(f"{API}/tags").json["tags"]] == in_code_points
    hits = client.post(f"{API}/search", json={"query": "tags", "mode": "fts"}).json["results"]
    assert hits[0]["tags"] == in_code_points
