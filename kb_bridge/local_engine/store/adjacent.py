"""Adjacent notes: for a chunk of a note kept in a collection, the chunks of the notes of the same collection
submitted just before and just after it, up to `reach` notes on either side, each with its distance (1: next
to it; search/context.py ranks with them). One statement for both SQL stores: they differ in the parameter
mark (`?` or `%s`, which also tells the dialect: PostgreSQL takes a list of ids as one array and reads each
neighbour's window behind a fence) and in their own `where_sql` for the filter.

Order is the order of submission, the job id that created each note (`jobs.type = 'note'`), not the
document id: the ingestion worker stores the documents of a batch in the order it finishes them, which is
not the order an agent wrote them. A neighbour is looked for among the SPAN submissions on either side and
must match the search's filter, so that context never brings in a note the search excludes. Documents that
no note job created (files, notes copied in by `kb-bridge migrate`) have no neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# How many submissions before and after a note are searched for its neighbour: bounds the work of one
# lookup when other collections' notes were submitted in between.
SPAN = 64
# Tags that name a collection (the bridge's collection:<name> convention, kb_bridge/collection_tags.py) start
# with this.
_COLLECTION = "collection:"
# Below this many notes in the store, the collection lookup walks the notes' chunks (an index of document
# ids, a fraction of a millisecond for all of them) rather than reading the row of each chunk asked about.
FEW_NOTES = 1000


def _among(column: str, values: Sequence[int], mark: str) -> tuple[str, list[object]]:
    """SQL and parameters for: `column` is one of `values`. PostgreSQL (psycopg's mark, %s) takes them as one
    array, so the statement's text is the same for any number of them: psycopg parses it once and prepares it
    after a few uses (a list of 100-200 marks was parsed and planned anew each search, 0.5 ms of a 1.2 ms
    lookup). SQLite takes a mark per value."""
    if mark == "%s":
        return f"{column} = ANY({mark})", [list(values)]
    return f"{column} IN ({', '.join([mark] * len(values))})", list(values)


def _names_a_collection(column: str, mark: str) -> str:
    """SQL for: the tag in `column` names a collection (its parameter: _COLLECTION). A prefix compared as
    such, not the range from "collection:" to "collection;": a database in a linguistic collation (the
    official PostgreSQL image makes them in en_US.UTF-8) sorts letters before punctuation, and no tag fell in
    that range there. Each use looks at the few tags of one document."""
    return f"substr({column}, 1, {len(_COLLECTION)}) = {mark}"


def _neighbour_sql(mark: str, where: str, before: bool, distance: int) -> str:
    """The id of the `distance`-th nearest note submitted before (or after) job `a` that shares a collection
    with a's note (LIMIT with OFFSET: both SQLite and PostgreSQL, and no LATERAL, which SQLite lacks)."""
    within, order = (f"id < a.id AND id >= a.id - {SPAN}", "DESC") if before else (
        f"id > a.id AND id <= a.id + {SPAN}", "ASC")
    # PostgreSQL: OFFSET 0 keeps the planner from folding the window into the join, so the window (at most
    # SPAN rows of the jobs' primary key) is always read first; ordered inside the fence, so that the LIMIT
    # stops at the first match. Without it, while the statistics did not know the search's tag yet (a memory
    # stored beside a migrated corpus, before autovacuum's next ANALYZE) the tag looked rare and the planner
    # read every note holding it for each anchor and side: 182 ms of a 202 ms search (docs/benchmarks.md,
    # "Memory beside a million chunks of files"). SQLite's planner starts from the window.
    fence = f" ORDER BY id {order} OFFSET 0" if mark == "%s" else ""
    return f"""(SELECT j.document_id
        FROM (SELECT id, document_id FROM jobs WHERE type = 'note' AND {within}{fence}) j
        JOIN documents d ON d.id = j.document_id
        WHERE {where}
          AND EXISTS (SELECT 1 FROM document_tags x JOIN document_tags y ON y.tag = x.tag
                      WHERE x.document_id = a.document_id AND y.document_id = j.document_id
                        AND {_names_a_collection("x.tag", mark)})
        ORDER BY j.id {order} LIMIT 1 OFFSET {int(distance) - 1})"""


def collection_notes(conn: Any, chunk_ids: Sequence[int], mark: str, choose_side: bool = False) -> set[int]:
    """Those of these chunks that belong to a note kept in a collection (an agent's memory, not a file).

    `choose_side` (SQLite): walk the notes when there are fewer than FEW_NOTES, else the given chunks. SQLite's
    planner cannot tell: it walked SciFact's 5,183 notes (3 ms a lookup), and told to start from the chunks it
    read 200 chunk rows a search among a million chunks of files that hold no note (1.9 ms;
    docs/benchmarks.md, "Retrieval quality (SciFact)").
    Without it (PostgreSQL) the lookup starts from the given chunks, always: a few hundred primary-key reads
    (about 1 ms). PostgreSQL's statistics of doc_type go stale: a memory of 2,760 notes stored beside 94,591
    documents is under autovacuum's 10 % of changes for a new ANALYZE, so its planner still counted no note and
    walked all of them, 5-10 ms a lookup (docs/benchmarks.md, "Memory beside a million chunks of files").
    """
    if not chunk_ids:
        return set()
    given, params = _among("c.id", chunk_ids, mark)
    kept = (f"d.doc_type = 'note' AND EXISTS (SELECT 1 FROM document_tags t WHERE t.document_id = c.document_id "
            f"AND {_names_a_collection('t.tag', mark)})")
    if choose_side:
        (notes,) = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM documents WHERE doc_type = 'note' LIMIT {FEW_NOTES}) AS n"
        ).fetchone()
        # CROSS JOIN: SQLite's loop runs over its left table.
        tables = "documents d CROSS JOIN chunks c" if notes < FEW_NOTES else "chunks c CROSS JOIN documents d"
        sql = f"SELECT c.id FROM {tables} WHERE d.id = c.document_id AND {given} AND {kept}"
    else:  # MATERIALIZED: the planner may not fold the given chunks into a join it reorders.
        sql = (f"WITH c AS MATERIALIZED (SELECT id, document_id FROM chunks c WHERE {given}) "
               f"SELECT c.id FROM c JOIN documents d ON d.id = c.document_id WHERE {kept}")
    rows = conn.execute(sql, [*params, _COLLECTION]).fetchall()
    return {int(chunk_id) for (chunk_id,) in rows}


def adjacent_notes(conn: Any, chunk_ids: Sequence[int], where: tuple[str, list[object]], mark: str,
                   reach: int = 1) -> dict[int, dict[int, int]]:
    """For each of these chunks that belongs to a note in a collection: the chunk ids of its neighbours, up to
    `reach` notes on either side, each with its distance in notes (1: submitted just before or after it).

    `where` is the backend's `where_sql(filter, "d")`; `mark` its parameter mark.
    """
    if not chunk_ids or reach < 1:
        return {}
    clause, params = where
    given, given_params = _among("id", chunk_ids, mark)
    anchors = {int(doc): int(chunk) for chunk, doc in conn.execute(
        f"SELECT id, document_id FROM chunks WHERE {given}", given_params).fetchall()}
    if not anchors:
        return {}
    documents, document_params = _among("a.document_id", list(anchors), mark)
    collection = [_COLLECTION]
    # One column per side and distance: the neighbours at distance 1..reach before, then the same after.
    sides = [(before, distance) for before in (True, False) for distance in range(1, reach + 1)]
    columns = ", ".join(_neighbour_sql(mark, clause, before, distance) for before, distance in sides)
    rows = conn.execute(
        f"SELECT a.document_id, {columns} "
        f"FROM jobs a WHERE a.type = 'note' AND {documents} AND EXISTS (SELECT 1 FROM "
        f"document_tags c WHERE c.document_id = a.document_id AND {_names_a_collection('c.tag', mark)})",
        [*[p for _ in sides for p in (*params, *collection)], *document_params, *collection],
    ).fetchall()
    # Only notes in a collection look for neighbours: the others (a corpus without collections) cost one
    # lookup each in the primary key of document_tags.
    # Each column is another note (another offset on one side), so a note has one distance.
    beside: dict[int, dict[int, int]] = {}
    for doc, *found in rows:
        for neighbour, (_, distance) in zip(found, sides, strict=True):
            if neighbour is not None:
                beside.setdefault(int(doc), {})[int(neighbour)] = distance
    wanted = sorted({n for ns in beside.values() for n in ns})
    if not wanted:
        return {}
    chunks_of: dict[int, list[int]] = {}
    neighbours, neighbour_params = _among("document_id", wanted, mark)
    for chunk, doc in conn.execute(
        f"SELECT id, document_id FROM chunks WHERE {neighbours} ORDER BY id", neighbour_params,
    ).fetchall():
        chunks_of.setdefault(int(doc), []).append(int(chunk))
    return {anchors[doc]: {c: d for n, d in ns.items() for c in chunks_of.get(n, [])}
            for doc, ns in beside.items() if ns}
