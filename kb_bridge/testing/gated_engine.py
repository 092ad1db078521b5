"""A real local engine in its own process whose model waits at a gate, to be killed mid-window.

`python -m kb_bridge.testing.gated_engine DATA PORT GATE CALLS [DATABASE_URL]` serves an engine on
127.0.0.1:PORT with a tiny stand-in model (vectors from a hash of the text) and one chunk per model call:
each call appends a line to CALLS (its texts) and then waits while the file GATE exists. A test
kills the process (SIGKILL) while a chosen job is in the model, and starts it again on the same data, as a
crash and a restart (tests/engine/test_engine_resumes.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import numpy as np

# A call waits this long at most: a test that forgets its engine does not leave it behind for ever.
GATE_SECONDS = 300.0


class HashedModel:
    """A tiny stand-in model: unit vectors drawn from a hash of the text, the same text the same vector within
    one process. Tests that only need the engine to hold vectors (not to rank by meaning) use it, or a
    subclass whose document calls wait at a gate."""

    name, dim, device, batch_size = "hashed-test-model", 8, "cpu", 1

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed_query(text) for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        vector = np.random.default_rng(abs(hash(text)) % 2**32).random(self.dim, dtype=np.float32)
        return vector / np.linalg.norm(vector)

    def submit_query(self, text: str) -> Future[np.ndarray]:
        future: Future[np.ndarray] = Future()
        future.set_result(self.embed_query(text))
        return future


class GatedModel(HashedModel):
    name = "gated-process-model"

    def __init__(self, gate: Path, calls: Path) -> None:
        self.gate = gate
        self.calls = calls

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        with open(self.calls, "a", encoding="utf-8") as out:
            out.write(" ".join(" ".join(text.split()) for text in texts) + "\n")
        deadline = time.monotonic() + GATE_SECONDS
        while self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # a stand-in for a slow model call, not a synchronisation
        return super().embed_documents(texts)


def main(argv: Sequence[str]) -> None:
    from werkzeug.serving import make_server

    from kb_bridge.local_engine.app import create_app
    from kb_bridge.local_engine.config import EngineConfig

    data, port, gate, calls = Path(argv[0]), int(argv[1]), Path(argv[2]), Path(argv[3])
    database_url = argv[4] if len(argv) > 4 else None
    config = EngineConfig(data_dir=data, database_url=database_url, embedder="none", port=port, embed_batch_size=1)
    app = create_app(config, embedder=GatedModel(gate, calls))
    make_server("127.0.0.1", port, app, threaded=True).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
