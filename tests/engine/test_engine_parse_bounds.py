"""What reading an upload may cost, whatever the file: memory that grows with the text, not with how many
(empty) lines, paragraphs or zip entries it lists, and no whole-document failure on markup browsers read.

Memory is measured with tracemalloc (Python's allocations), on inputs a few times smaller than the reviewer's
(20 MB of "# a" lines took 1.9 GiB to chunk, 22 million empty DOCX paragraphs 1.5 GiB), so that each test
runs in a second or two and the growth still shows: tens of MiB before the fix, a few after.
"""

from __future__ import annotations

import io
import logging
import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flask
import pytest

from kb_bridge.local_engine.errors import IngestionError
from kb_bridge.local_engine.ingest import docx_text, parsers, worker
from kb_bridge.local_engine.ingest.chunking import ChunkingPolicy, chunk_text
from kb_bridge.testing.engine_app import API, upload, wait_job

MiB = 1024 * 1024
W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def peak_bytes(work: Callable[[], Any]) -> tuple[Any, int]:
    """What `work` returns, and the most memory Python allocated while it ran."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def docx_of(document_xml: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", document_xml)
    return buffer.getvalue()


def test_a_zip_whose_end_record_hides_a_huge_entry_list_is_refused_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end record says 1 entry; its central directory (which zipfile reads by size, whatever the count)
    lists 200,000: refused from the end record, zipfile never opens the archive."""
    entries = bytearray()
    for n in range(200_000):
        name = b"%07x" % n
        entries += struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0,
                               len(name), 0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(entries), 0, 0)
    path = tmp_path / "lies.docx"
    path.write_bytes(bytes(entries) + end)
    assert len(entries) > docx_text.MAX_DIRECTORY_BYTES

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("zipfile read the entry list")

    monkeypatch.setattr(docx_text.zipfile, "ZipFile", never)
    with pytest.raises(IngestionError, match=r"not a DOCX file: its zip archive's list of entries takes \d+ bytes"):
        parsers.extract_text(path, "docx")


def test_empty_paragraphs_and_rows_cost_no_memory(tmp_path: Path) -> None:
    paragraphs = 600_000
    body = "<w:p/>" * paragraphs + "<w:p><w:r><w:t>the text</w:t></w:r></w:p>" + "<w:tbl>" + "<w:tr/>" * 300_000 + "</w:tbl>"
    path = tmp_path / "empties.docx"
    path.write_bytes(docx_of(f"<w:document {W}><w:body>{body}</w:body></w:document>".encode()))
    assert path.stat().st_size < MiB
    text, peak = peak_bytes(lambda: parsers.extract_text(path, "docx"))
    assert text == "the text"
    assert peak < 16 * MiB, f"{peak / MiB:.0f} MiB"


def test_too_many_paragraphs_with_text_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docx_text, "MAX_BLOCKS", 1000)
    body = "<w:p><w:r><w:t>a</w:t></w:r></w:p>" * 1001
    path = tmp_path / "many.docx"
    path.write_bytes(docx_of(f"<w:document {W}><w:body>{body}</w:body></w:document>".encode()))
    with pytest.raises(IngestionError, match="the DOCX file has over 1,000 paragraphs and table rows, the limit"):
        parsers.extract_text(path, "docx")


@pytest.mark.parametrize(("text", "doc_type"), [("# a\n" * 300_000, "md"), ("a\n\n" * 300_000, "txt"),
                                                ("a. " * 300_000, "txt"), ("a \n" * 300_000, "txt")])
def test_chunking_memory_grows_with_the_text_not_its_lines(text: str, doc_type: str) -> None:
    """Headings, paragraphs, sentences and lines of one character each: memory stays within a few times the
    text (its copies and its chunks), where a list of every line took fifty times."""
    chunks, peak = peak_bytes(lambda: chunk_text(text, doc_type, ChunkingPolicy()))
    assert chunks and all(len(chunk) <= 1000 for chunk in chunks)
    assert peak < 10 * len(text), f"{peak / len(text):.0f} times the text"


@pytest.mark.parametrize(("html", "text"), [("<p>a</p><![ x]>b", "a\n\nb"), ("x<![1 y", "x<![1 y"),
                                            ("<p>real text</p><![ x</body></html>", "real text")])
def test_a_marked_section_without_a_name_is_no_failure(tmp_path: Path, html: str, text: str) -> None:
    """`<![` then no name: the standard library raised AssertionError and the whole document failed."""
    path = tmp_path / "page.html"
    path.write_text(html)
    assert parsers.extract_text(path, "html") == text


def test_an_error_quoting_the_file_is_one_bounded_line_in_the_job_and_the_log(
        make_app: Callable[..., flask.Flask], caplog: pytest.LogCaptureFixture) -> None:
    """A 2 KB DOCX naming a main part 2,000,000 characters long, newlines in it: its error quoted the name whole,
    into the job's row, every listing of jobs and the log (where the newlines wrote lines of their own)."""
    forged = "word/x\n2026-11-28 02:00:00,000 CRITICAL kb_bridge.local_engine.api.auth: FORGED\n"
    target = (forged + "A" * 2_000_000).replace("\n", "&#10;")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("_rels/.rels", '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
                         'relationships"><Relationship Id="r1" Type="http://schemas.openxmlformats.org/officeDocument/'
                         f'2006/relationships/officeDocument" Target="{target}"/></Relationships>')
    assert len(buffer.getvalue()) < 4096
    client = make_app().test_client()
    with caplog.at_level(logging.INFO, logger="kb_bridge.local_engine"):
        job = wait_job(client, upload(client, "forged.docx", buffer.getvalue()).get_json()["id"])
    error = job["error"]
    assert job["status"] == "failed" and error.startswith("not a DOCX file: the zip archive has no word/x\\x0a2026")
    assert len(error) <= worker.MAX_ERROR_CHARS and "\n" not in error
    listed = client.get(f"{API}/jobs").get_json()["jobs"]
    assert [j["error"] for j in listed if j["id"] == job["id"]] == [error]
    logged = [r.getMessage() for r in caplog.records if f"job {job['id']} failed" in r.getMessage()]
    assert len(logged) == 1 and "\n" not in logged[0] and len(logged[0]) < 2 * worker.MAX_ERROR_CHARS
