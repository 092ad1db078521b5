"""Which runtimes and number formats made a store's vectors, and whether this engine's vectors still match them.

`meta.embedding_model` names the model whose vectors a store holds (vectors of another model are dropped
and remade: store/sqlite/documents.py `use_model`). Within one model, the number format moves a vector a
little: each format is calibrated at load against float32 (precision.py, onnx_precision.py) and its lowest
cosine to float32 over the calibration texts is its `cosine`. `meta.embedding_writers` lists the
(runtime, precision, cosine) of every engine that has written vectors since the last re-embedding. Two
vectors each within angle acos(a) and acos(b) of the float32 one are within acos(a) + acos(b) of each other,
so a store stays searchable as is while cos(acos(a) + acos(b)) >= `MIN_COSINE` for every writer a; below
that the engine says so at start and names the command that re-embeds every chunk with the current format
(reembed.py). Nothing is dropped: search keeps working with the vectors there are.

A store written before writers were recorded counts as one writer at cosine 0.999, the lowest any earlier
format was allowed (embedder.py's DOCUMENT_MIN_COSINE for torch's 16-bit documents; ONNX was float32).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from typing import Any, Protocol

logger = logging.getLogger(__name__)

WRITERS_KEY = "embedding_writers"
MIN_COSINE = 0.99
REEMBED_COMMAND = "kb-bridge engine --reembed"


class Meta(Protocol):
    def read_meta(self, key: str) -> str | None: ...

    def write_meta(self, key: str, value: str | None) -> None: ...

    def vector_count(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Writer:
    runtime: str
    precision: str
    cosine: float  # lowest cosine to float32 over the calibration texts

    def as_json(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "precision": self.precision, "cosine": round(self.cosine, 6)}

    @property
    def label(self) -> str:
        return f"{self.runtime}/{self.precision}"


UNRECORDED = Writer("unrecorded", "unrecorded", 0.999)


def writer_of(embedder: Any) -> Writer:
    """The documents' side of an embedder (its queries are checked with `query_agreement` in `check`)."""
    precision = getattr(embedder, "document_format", getattr(embedder, "document_precision", "float32"))
    return Writer(str(getattr(embedder, "runtime", "unknown")), str(precision),
                  round(float(getattr(embedder, "document_agreement", 1.0)), 6))


def worst_cosine(a: float, b: float) -> float:
    """The lowest cosine two vectors can have when each is within cosine `a`, `b` of a third."""
    return math.cos(min(math.pi, math.acos(min(1.0, a)) + math.acos(min(1.0, b))))


def stored_writers(store: Meta) -> list[Writer]:
    text = store.read_meta(WRITERS_KEY)
    if text is None:
        return [UNRECORDED] if store.vector_count() else []
    return [Writer(str(item["runtime"]), str(item["precision"]), float(item["cosine"])) for item in json.loads(text)]


def too_far(writers: list[Writer], current: Writer, query_cosine: float = 1.0) -> list[Writer]:
    """The writers whose vectors may be further than `MIN_COSINE` from this engine's documents or queries
    (the same runtime and format makes the same vectors)."""
    ours = min(current.cosine, query_cosine)
    return [writer for writer in writers
            if writer.label != current.label and worst_cosine(writer.cosine, ours) < MIN_COSINE]


def record(store: Meta, embedder: Any) -> list[Writer]:
    """Add this engine to the store's writers; log (and return) the writers too far from it."""
    current = writer_of(embedder)
    writers = stored_writers(store)
    far = too_far(writers, current, float(getattr(embedder, "query_agreement", 1.0)))
    if far:
        logger.warning("stored vectors were made by %s, which may differ from this engine's %s (cosine %.4f to "
                       "float32) by more than cosine %.2f: search works, but less well; run `%s` to re-embed "
                       "every chunk with %s", ", ".join(writer.label for writer in far), current.label,
                       current.cosine, MIN_COSINE, REEMBED_COMMAND, current.label)
    if current not in writers:
        store.write_meta(WRITERS_KEY, json.dumps([writer.as_json() for writer in [*writers, current]]))
    return far


def reset(store: Meta, embedder: Any) -> None:
    """Every vector is now this engine's (after a re-embedding)."""
    store.write_meta(WRITERS_KEY, json.dumps([writer_of(embedder).as_json()]))
