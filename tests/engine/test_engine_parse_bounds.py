"""What reading an upload may cost, whatever the file: memory that grows with the text, not with how many
(empty) lines, paragraphs or zip entries it lists, and no whole-document failure on markup browsers read.

Memory is measured with tracemalloc (Python's allocations), on inputs a few times smaller than the reviewer's
(20 MB of "# a" lines took 1.9 GiB to chunk, 22 million empty DOCX paragraphs 1.5 GiB), so that each test
runs in a second or two and the growth still shows: tens of MiB before the fix, a few after.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kb_bridge.local_engine.errors import IngestionError
from kb_bridge.local_engine.ingest import docx_text, parsers
from kb_bridge.local_engine.ingest.chunking import ChunkingPolicy, chunk_text

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
