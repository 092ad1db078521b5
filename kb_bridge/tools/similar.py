"""Near-duplicate hints for kb_addnote: the notes of the same collection whose text the engine's vector
search finds most like a new note's.

The cut-off was measured on paraphrased and unrelated note pairs with the bundled model
(bench/near_duplicates.py; docs/benchmarks.md, "Near-duplicate notes"). A hint never fails the add: an
engine without vectors (its answer's mode is not `vector`) or an error gives no hints.
"""

from __future__ import annotations

import logging
from typing import Any

from kb_bridge import collection_tags, shapes
from kb_bridge.errors import KbError
from kb_bridge.tools.render import clip
from kb_bridge.tools.spec import ToolContext

logger = logging.getLogger(__name__)

SIMILAR_SCORE = 0.60  # cosine; see the module docstring
MAX_SIMILAR = 3
SNIPPET_CHARS = 160
_QUERY_CHARS = 4000  # the engine's longest query (docs/engine-api.md)

SIMILAR = {"type": "array", "items": shapes.obj(
    {"document_id": shapes.INT, "title": shapes.OPT_STR, "score": {"type": "number"}, "snippet": shapes.STR},
    required=[])}


def similar_notes(ctx: ToolContext, text: str, collection: str, exclude: int | None) -> list[dict[str, Any]]:
    """Up to MAX_SIMILAR notes of `collection` (not `exclude`) at least SIMILAR_SCORE alike, best first."""
    query = " ".join(text.split())[:_QUERY_CHARS]
    if not query:
        return []
    body = {"query": query, "top_n": 2 * MAX_SIMILAR + 1, "tags": [collection_tags.tag_for(collection)],
            "doc_type": "note", "mode": "vector"}
    try:
        answer = ctx.engine.search(body)
    except KbError as exc:
        logger.warning("no near-duplicate hints for a new note: %s", exc.code)
        return []
    if answer.get("mode") != "vector":
        return []
    found: dict[int, dict[str, Any]] = {}
    for hit in (shapes.chunk(raw) for raw in shapes.listed(answer, "results")):
        score = hit["score"]
        if hit["document_id"] == exclude or not isinstance(score, (int, float)) or score < SIMILAR_SCORE:
            continue
        if hit["document_id"] not in found:
            found[hit["document_id"]] = {"document_id": hit["document_id"], "title": hit["title"],
                                         "score": round(float(score), 3), "snippet": clip(hit["text"], SNIPPET_CHARS)}
    return sorted(found.values(), key=lambda s: -s["score"])[:MAX_SIMILAR]
