"""Pure pieces: chunking, HTML text, the vector index, configuration, the command line."""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from kb_bridge.local_engine import cli
from kb_bridge.local_engine.ingest import parsers
from kb_bridge.local_engine.ingest.chunking import ChunkingPolicy, chunk_text, embedding_input
from kb_bridge.local_engine.config import EngineConfig, load_config
from kb_bridge.local_engine.errors import ConfigError
from kb_bridge.local_engine.store.vector_index import VectorIndex

POLICY = ChunkingPolicy(max_chars=300, overlap=60)


def _sentences(n: int, word: str = "word") -> str:
    return " ".join(f"Sentence {i} has a {word} and more filler text." for i in range(n))


def test_prose_chunks_are_bounded_and_overlap() -> None:
    chunks = chunk_text(_sentences(40), "txt", POLICY)
    assert len(chunks) > 3
    assert all(len(chunk) <= POLICY.max_chars for chunk in chunks)
    for previous, following in pairwise(chunks):
        tail = previous[-30:]
        assert tail in following  # the overlap carries the end of one chunk into the next
    joined = " ".join(chunks)
    assert all(f"Sentence {i} " in joined for i in range(40))


def test_short_text_is_one_chunk_and_empty_text_none() -> None:
    assert chunk_text("  hello\r\n\r\n\r\n world ", "txt", POLICY) == ["hello\n\nworld"]
    assert chunk_text(" \n\t ", "txt", POLICY) == []


def test_words_longer_than_a_chunk_are_cut() -> None:
    chunks = chunk_text("x" * 1000, "txt", POLICY)
    assert all(len(chunk) <= POLICY.max_chars for chunk in chunks) and "".join(chunks) == "x" * 1000


def test_markdown_splits_at_headings_and_repeats_the_heading() -> None:
    text = "# Title\n\nIntro.\n\n## Install\n\n" + _sentences(20, "install") + "\n\n## Usage\n\nRun it."
    chunks = chunk_text(text, "md", POLICY)
    assert chunks[0].startswith("# Title")
    install = [chunk for chunk in chunks if "install" in chunk and "Sentence" in chunk]
    assert len(install) > 1 and all(chunk.startswith("## Install") for chunk in install)
    assert chunks[-1].endswith("Run it.") and "## Usage" in chunks[-1]
    assert all(len(chunk) <= POLICY.max_chars for chunk in chunks)


def test_headings_inside_code_fences_are_not_headings() -> None:
    text = "# Real\n\n```\n# not a heading\n```\n\nafter"
    assert chunk_text(text, "md", ChunkingPolicy(max_chars=1000, overlap=100)) == [text]


def test_small_markdown_sections_are_packed_together() -> None:
    text = "# A\n\none\n\n# B\n\ntwo\n\n# C\n\nthree"
    assert chunk_text(text, "note", POLICY) == [text]


def test_the_model_reads_each_chunk_with_its_title() -> None:
    assert embedding_input("Parental leave", "Up to 26 weeks.") == "Parental leave\n\nUp to 26 weeks."
    assert embedding_input("  Parental \n leave ", "x") == "Parental leave\n\nx"
    assert embedding_input("", "Up to 26 weeks.") == "Up to 26 weeks."
    # A note titled by its first line (derived titles end in an ellipsis when cut) is not titled twice.
    assert embedding_input("# Release runbook", "# Release runbook\n\nTag it.") == "# Release runbook\n\nTag it."
    assert embedding_input("Release runbook", "# Release runbook\n\nTag it.") == "# Release runbook\n\nTag it."
    assert embedding_input("A very long first line…", "A very long first line that goes on") == (
        "A very long first line that goes on")
    assert embedding_input("t" * 500, "x") == "t" * 200 + "\n\nx"


def test_html_text_skips_scripts_and_marks_headings(tmp_path: Path) -> None:
    page = tmp_path / "p.html"
    page.write_text("<html><head><title>t</title><style>x{}</style></head><body><h2>Head</h2>"
                    "<p>One &lt;two&gt; <b>three</b></p><script>alert(1)</script><ul><li>a</li><li>b</li></ul>"
                    "</body></html>", encoding="utf-8")
    text = parsers.extract_text(page, "html")
    assert "## Head" in text and "One <two> three" in text and "alert" not in text and "x{}" not in text
    assert "a\n\nb" in text


def test_text_decoding_fallbacks() -> None:
    assert parsers.decode_text("café".encode("utf-8")) == "café"
    assert parsers.decode_text("\ufeffbom".encode("utf-8")) == "bom"
    assert parsers.decode_text("café".encode("cp1252")) == "café"
    assert parsers.decode_text("hi".encode("utf-16")) == "hi"


def test_doc_types_by_extension() -> None:
    assert parsers.doc_type_for("A.PDF") == "pdf" and parsers.doc_type_for("x.markdown") == "md"
    assert parsers.doc_type_for("x.exe") is None and parsers.doc_type_for("noext") is None


def _unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_vector_index_search_filters_and_removal() -> None:
    index = VectorIndex(dim=3)
    index.add([1, 2, 3], np.stack([_unit(1, 0, 0), _unit(1, 1, 0), _unit(0, 0, 1)]))
    query = _unit(1, 0.1, 0)
    assert [hit[0] for hit in index.search(query, 3)] == [1, 2, 3]
    assert [hit[0] for hit in index.search(query, 3, allowed=[3])] == [3]
    assert index.search(query, 3, allowed=[]) == []
    assert [hit[0] for hit in index.search(query, 3, excluded={1, 2})] == [3]
    assert [hit[0] for hit in index.search(query, 1, excluded={1})] == [2]
    index.remove([1])
    assert len(index) == 2 and [hit[0] for hit in index.search(query, 3)] == [2, 3]
    assert index.vector_of(1) is None and np.allclose(index.vector_of(3), _unit(0, 0, 1), atol=1e-3)
    index.add([2], _unit(0, 1, 0)[None, :])  # replacing a vector keeps one per chunk
    assert len(index) == 2 and np.allclose(index.vector_of(2), _unit(0, 1, 0), atol=1e-3)


def test_config_from_environment(tmp_path: Path) -> None:
    config = load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_API_KEY": "k", "KB_ENGINE_BIND": "0.0.0.0:9000",
                          "KB_ENGINE_EMBEDDER": "NONE", "KB_ENGINE_RRF_K": "10", "KB_ENGINE_WAIT_FOR_MODEL": "yes",
                          "KB_ENGINE_FUSION": "RRF", "KB_ENGINE_EMBED_WORKERS": "3"})
    assert (config.data_dir, config.api_key, config.host, config.port) == (tmp_path, "k", "0.0.0.0", 9000)
    assert config.embedder == "none" and config.rrf_k == 10 and config.wait_for_model and config.fusion == "rrf"
    assert config.embed_workers == 3 and load_config({"HOME": "/h"}).embed_workers == 0  # 0: picked per machine
    assert load_config({"XDG_DATA_HOME": str(tmp_path)}).data_dir == tmp_path / "kb-bridge" / "engine"
    assert load_config({"HOME": "/h"}, {"port": 1234, "threads": None}).port == 1234


@pytest.mark.parametrize("env, variable", [
    ({"KB_ENGINE_THREADS": "many"}, "KB_ENGINE_THREADS"),
    ({"KB_ENGINE_THREADS": "0"}, "KB_ENGINE_THREADS"),
    ({"KB_ENGINE_BIND": "nohostport"}, "KB_ENGINE_BIND"),
    ({"KB_ENGINE_EMBEDDER": "bert"}, "KB_ENGINE_EMBEDDER"),
    ({"KB_ENGINE_WAIT_FOR_MODEL": "maybe"}, "KB_ENGINE_WAIT_FOR_MODEL"),
    ({"KB_ENGINE_CHUNK_OVERLAP": "900"}, "KB_ENGINE_CHUNK_OVERLAP"),
    ({"KB_ENGINE_FUSION": "max"}, "KB_ENGINE_FUSION"),
    ({"KB_ENGINE_QUERY_PRECISION": "int4"}, "KB_ENGINE_QUERY_PRECISION"),
    ({"KB_ENGINE_QUERY_THREADS": "0"}, "KB_ENGINE_QUERY_THREADS"),
    ({"KB_ENGINE_EMBED_WORKERS": "-1"}, "KB_ENGINE_EMBED_WORKERS"),
    ({"KB_ENGINE_FTS_WEIGHT": "0", "KB_ENGINE_VECTOR_WEIGHT": "0"}, "KB_ENGINE_FTS_WEIGHT"),
])
def test_config_errors_name_the_variable(tmp_path: Path, env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_config({"KB_ENGINE_DATA": str(tmp_path), **env})


def test_open_bind_without_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KB_API_KEY"):
        EngineConfig(data_dir=tmp_path, host="0.0.0.0").check_bind_is_safe()
    EngineConfig(data_dir=tmp_path, host="0.0.0.0", api_key="k").check_bind_is_safe()
    EngineConfig(data_dir=tmp_path, host="0.0.0.0", allow_no_auth=True).check_bind_is_safe()
    EngineConfig(data_dir=tmp_path, host="::1").check_bind_is_safe()
    EngineConfig(data_dir=tmp_path, host="localhost").check_bind_is_safe()


def test_cli_help_and_refusal(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--data" in out and "--bind" in out and "KB_API_KEY" in out and "KB_ENGINE_EMBEDDER" in out
    monkeypatch.delenv("KB_API_KEY", raising=False)
    assert cli.main(["--data", str(tmp_path), "--bind", "0.0.0.0:8000"]) == 2
    assert "refusing to bind" in capsys.readouterr().err
    assert cli.main(["--data", str(tmp_path), "--bind", "8000"]) == 2


@pytest.mark.parametrize("given, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_engine_command_lets_torch_threads_sleep_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None, expected: str) -> None:
    """OMP_WAIT_POLICY must be in the environment before torch loads (the server loads it later); an
    operator's own value stands."""
    from kb_bridge.local_engine import server

    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", given)
    seen: dict[str, str | None] = {}

    def serve(config: object, log_level: str) -> int:
        seen["policy"] = os.environ.get("OMP_WAIT_POLICY")
        return 0

    monkeypatch.setattr(server, "serve", serve)
    assert cli.main(["--data", str(tmp_path), "--no-embeddings"]) == 0
    assert seen["policy"] == expected


def test_chunking_is_linear_on_text_without_break_points() -> None:
    """32 MB of text with no space or newline chunks in about 8 times the time of 4 MB (at most 12):
    cutting it used to copy the remainder at every cut, which made it quadratic (x51)."""
    import time

    def cpu_seconds(megabytes: int) -> float:
        text = "x" * (megabytes * 1024 * 1024)
        started = time.process_time()
        chunks = chunk_text(text, "txt", ChunkingPolicy())
        assert sum(len(c) for c in chunks) == len(text) and max(len(c) for c in chunks) == 1000
        return time.process_time() - started

    # The best of a few runs: a busy machine (other processes evicting caches) only ever adds time.
    small = min(cpu_seconds(4) for _ in range(3))
    large = min(cpu_seconds(32) for _ in range(2))
    assert large <= 12 * small, (small, large)
