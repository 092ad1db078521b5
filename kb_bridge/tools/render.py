"""Short text renderings of tool results, for clients that show the model only text.

Structured content carries the full result; the text says the same in a compact, readable
form: ids an agent needs for follow-up calls, and for search the chunk text itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def clip(text: str | None, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def one_line(text: str) -> str:
    """A stored title or source on one line. The bridge refuses line breaks in them, but a client writing to the
    engine directly can store one, which would end the line (a list item, a `# title` heading) that shows it."""
    return " ".join(text.splitlines())


def title(text: str | None, limit: int = 80) -> str:
    """A title as a result line shows it: on one line, clipped."""
    return clip(one_line(text or ""), limit)


def document_line(doc: Mapping[str, Any]) -> str:
    tags = ", ".join(doc.get("tags") or []) or "-"
    return (
        f"- #{doc['id']} {title(doc.get('title') or doc.get('source_path') or '(untitled)')}"
        f" [{doc.get('doc_type') or '?'}] collection={doc.get('collection') or '-'} tags={tags}"
        f" v{doc.get('version') or '?'} updated {doc.get('updated_at') or '?'}"
    )


def documents(docs: list[Mapping[str, Any]], empty: str = "No documents.") -> str:
    if not docs:
        return empty
    lines = [document_line(d) for d in docs]
    for doc in docs:
        if doc.get("versions"):
            lines.append(f"Versions of #{doc['id']} (newest first; kb_get with version reads one): " + "; ".join(
                f"v{v['version']} {v.get('updated_at') or '?'} by {v.get('changed_by') or 'unknown'}"
                for v in doc["versions"]))
        if doc.get("content") is not None:
            lines.append(f"\n## #{doc['id']} content\n{clip(doc['content'], 4000)}")
    return "\n".join(lines)


def job_line(job: Mapping[str, Any]) -> str:
    extra = f" document #{job['document_id']}" if job.get("document_id") else ""
    error = f" error: {clip(job.get('error'), 200)}" if job.get("error") else ""
    return f"- job {job['id']} {job.get('type') or ''} {job['status']}{extra}{error}".replace("  ", " ")


def search_results(result: Mapping[str, Any]) -> str:
    hits = result["results"]
    head = f"{len(hits)} result(s) for {clip(result['query'], 100)!r} (mode: {result['mode']})"
    lines = [head]
    for i, hit in enumerate(hits, 1):
        score = f"{hit['score']:.4f}" if isinstance(hit.get("score"), (int, float)) else "-"
        name = title(hit.get("title") or hit.get("source_path") or "(untitled)")
        tags = ", ".join(hit.get("tags") or [])
        lines.append(
            f"\n{i}. {name} — document #{hit['document_id']} chunk #{hit['chunk_id']} score {score}"
            f" collection={hit.get('collection') or '-'}{' tags=' + tags if tags else ''}\n{clip(hit['text'], 1500)}"
        )
    return "\n".join(lines)
