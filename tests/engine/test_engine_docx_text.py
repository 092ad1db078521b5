"""DOCX uploads are read with the standard library (ingest/docx_text.py) and give the text python-docx gave.

python-docx (the `test` extra) builds the documents and is the reference: the text `_read_docx` gave when it
read with python-docx (kept below as `python_docx_read`), and python-docx's own paragraphs, style names and
row cells. Hostile files (a DOCTYPE, a zip bomb, merged cells that repeat a large text, not a DOCX at all)
are refused with a message that says why, and an upload of one fails its job with that message.
"""

from __future__ import annotations

import configparser
import io
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import docx
import pytest
from docx.enum.style import WD_STYLE_TYPE
from docx.enum.text import WD_BREAK
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls, qn
from flask.testing import FlaskClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kb_bridge.local_engine.errors import IngestionError
from kb_bridge.local_engine.ingest import docx_text, parsers
from kb_bridge.local_engine.ingest.docx_text import DocxText, read_docx
from kb_bridge.testing.docx_files import MiB, declare_size, part, rewrite_zip, write_zip_bomb
from kb_bridge.testing.engine_app import upload, wait_job

W = nsdecls("w")


def python_docx_read(path: Path) -> str:
    """`_read_docx` as it was with python-docx (kb_bridge/local_engine/ingest/parsers.py before the change)."""
    document = docx.Document(str(path))
    blocks: list[str] = []
    for paragraph in document.paragraphs:
        text = paragraph.text.strip()
        if not text:
            continue
        level = parsers._heading_level(paragraph.style.name if paragraph.style is not None else "")
        blocks.append(f"{'#' * level} {text}" if level else text)
    for table in document.tables:
        for row in table.rows:
            cells = [cell.text.strip() for cell in row.cells]
            if any(cells):
                blocks.append(" | ".join(cells))
    return "\n\n".join(blocks)


def python_docx_view(path: Path) -> DocxText:
    """What python-docx itself shows: each body paragraph's style name and text, each table row's cell texts."""
    document = docx.Document(str(path))
    return DocxText(
        paragraphs=[(p.style.name if p.style is not None else None, p.text) for p in document.paragraphs],
        table_rows=[[cell.text for cell in row.cells] for table in document.tables for row in table.rows],
    )


def saved(document: object) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)  # type: ignore[attr-defined]
    return buffer.getvalue()


def styled() -> bytes:
    """Title, Heading 1-3, custom styles, and style ids that name no paragraph style."""
    document = docx.Document()
    document.add_heading("The Title", level=0)
    for level in (1, 2, 3):
        document.add_heading(f"Heading at level {level}", level=level)
        document.add_paragraph(f"Body under level {level}.")
    document.styles.add_style("Quote Box", WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("In a custom style.", style="Quote Box")
    document.styles.add_style("Heading Extra", WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("Not a numbered heading.", style="Heading Extra")
    # A custom style Word stores as "heading 4" (python-docx shows "Heading 4"), one without a type, one
    # id twice (the first counts), and ids that name a character style, nothing, or are empty.
    styles = document.styles.element
    styles.append(parse_xml(f'<w:style {W} w:type="paragraph" w:styleId="Mine4"><w:name w:val="heading 4"/>'
                            "</w:style>"))
    styles.append(parse_xml(f'<w:style {W} w:styleId="Untyped"><w:name w:val="Heading 5"/></w:style>'))
    styles.append(parse_xml(f'<w:style {W} w:type="paragraph" w:styleId="Twice"><w:name w:val="Heading 6"/>'
                            "</w:style>"))
    styles.append(parse_xml(f'<w:style {W} w:type="paragraph" w:styleId="Twice"><w:name w:val="Title"/>'
                            "</w:style>"))
    for style_id, text in [("Mine4", "Custom heading four."), ("Untyped", "Untyped style."),
                           ("Twice", "First of two ids."), ("DefaultParagraphFont", "A character style id."),
                           ("NoSuchStyle", "An unknown id."), ("", "An empty id.")]:
        paragraph = document.add_paragraph(text)
        paragraph._p.get_or_add_pPr().append(parse_xml(f'<w:pStyle {W} w:val="{style_id}"/>'))
    return saved(document)


def runs() -> bytes:
    """Tabs, breaks of each kind, a hyperlink, runs python-docx leaves out, empty paragraphs, unicode."""
    document = docx.Document()
    paragraph = document.add_paragraph("Before a tab")
    run = paragraph.add_run("after")
    run.add_tab()
    run.add_text("tabbed")
    run.add_break()
    run.add_text("new line")
    run.add_break(WD_BREAK.PAGE)
    run.add_text("after a page break")
    run.add_break(WD_BREAK.COLUMN)
    paragraph.add_run("text with\ttab and\nnewline")
    paragraph._p.append(parse_xml(
        f'<w:r {W}><w:t>no</w:t><w:noBreakHyphen/><w:t>break</w:t><w:ptab w:relativeTo="margin" '
        'w:alignment="right" w:leader="none"/><w:t>ptab</w:t><w:cr/><w:t xml:space="preserve">  kept  </w:t>'
        '<w:br w:type="textWrapping"/><w:t/></w:r>'))
    linked = document.add_paragraph("See ")
    r_id = document.part.relate_to("https://example.org/page", RT.HYPERLINK, is_external=True)
    linked._p.append(parse_xml(
        f'<w:hyperlink {nsdecls("w", "r")} r:id="{r_id}"><w:r><w:t>the linked</w:t></w:r><w:r><w:tab/>'
        "<w:t>text</w:t></w:r></w:hyperlink>"))
    linked.add_run(" for more.")
    changed = document.add_paragraph("Kept")
    changed._p.append(parse_xml(
        f'<w:ins {W} w:id="1" w:author="a" w:date="2024-01-01T00:00:00Z"><w:r><w:t>inserted</w:t></w:r>'
        "</w:ins>"))
    changed._p.append(parse_xml(f"<w:smartTag {W} w:element=\"x\"><w:r><w:t>tagged</w:t></w:r></w:smartTag>"))
    document.add_paragraph("")
    document.add_paragraph("   ")
    document.add_paragraph()
    document.add_heading("Ünïcödé — 日本語 العربية 🦉 e\u0301", level=2)
    document.add_paragraph("Zero\u200bwidth and non\u00a0breaking.")
    return saved(document)


def tables() -> bytes:
    """Tables between paragraphs: merged across, down and both, several paragraphs in a cell, a nested table,
    a row that starts late (gridBefore) under a wide merged cell."""
    document = docx.Document()
    document.add_paragraph("Before the tables.")
    table = document.add_table(rows=5, cols=4)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"r{r}c{c}"
    table.cell(0, 0).merge(table.cell(0, 1))
    table.cell(1, 0).merge(table.cell(3, 0))
    table.cell(1, 1).merge(table.cell(2, 2))
    table.cell(4, 3).add_paragraph("second paragraph")
    table.cell(4, 2).text = ""
    table.cell(4, 1).add_table(rows=1, cols=1).cell(0, 0).text = "nested"
    document.add_paragraph("Between the tables.")
    empty = document.add_table(rows=2, cols=2)
    empty.cell(1, 1).text = "only one"
    raw = parse_xml(
        f"<w:tbl {W}><w:tblGrid><w:gridCol/><w:gridCol/><w:gridCol/></w:tblGrid>"
        "<w:tr><w:tc><w:p><w:r><w:t>left</w:t></w:r></w:p></w:tc>"
        '<w:tc><w:tcPr><w:gridSpan w:val="2"/><w:vMerge w:val="restart"/></w:tcPr>'
        "<w:p><w:r><w:t>wide top</w:t></w:r></w:p></w:tc></w:tr>"
        '<w:tr><w:trPr><w:gridBefore w:val="1"/></w:trPr><w:tc><w:tcPr><w:gridSpan w:val="2"/><w:vMerge/>'
        "</w:tcPr><w:p/></w:tc></w:tr>"
        '<w:tr><w:tc><w:p><w:r><w:t>a</w:t></w:r></w:p></w:tc><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>'
        "</w:tr></w:tbl>")
    document.add_paragraph("After the tables.")._p.addnext(raw)
    return saved(document)


def default_is_a_heading() -> bytes:
    """A paragraph without a style takes the default paragraph style: here Heading 1 (the last default)."""
    document = docx.Document()
    document.styles["Heading 1"].element.set(qn("w:default"), "1")
    document.add_paragraph("Unstyled, so a heading.")
    document.add_paragraph("Normal on purpose.", style="Normal")
    return saved(document)


def without_styles() -> bytes:
    """No styles part: python-docx falls back to its template, whose one paragraph style is Normal."""
    data = saved(_with_headings())
    rels = part(data, "word/_rels/document.xml.rels").decode()
    rels = re.sub(r'<Relationship [^>]*relationships/styles"[^>]*/>', "", rels)
    return rewrite_zip(data, {"word/styles.xml": None, "word/_rels/document.xml.rels": rels.encode()})


def main_part_renamed() -> bytes:
    """The main document part where _rels/.rels says it is, not at word/document.xml."""
    data = saved(_with_headings())
    renamed = {name: part(data, name).replace(b"word/document.xml", b"word/main.xml")
               .replace(b"/word/document.xml", b"/word/main.xml")
               for name in ("_rels/.rels", "[Content_Types].xml")}
    return rewrite_zip(data, {**renamed, "word/document.xml": None, "word/main.xml": part(data, "word/document.xml"),
                              "word/_rels/document.xml.rels": None,
                              "word/_rels/main.xml.rels": part(data, "word/_rels/document.xml.rels")})


def _with_headings() -> object:
    document = docx.Document()
    document.add_heading("A heading", level=1)
    document.add_paragraph("A paragraph.")
    return document


DOCUMENTS: dict[str, Callable[[], bytes]] = {
    "styled": styled, "runs": runs, "tables": tables, "default_is_a_heading": default_is_a_heading,
    "without_styles": without_styles, "main_part_renamed": main_part_renamed,
}


@pytest.mark.parametrize("name", DOCUMENTS)
def test_text_is_what_python_docx_gave(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.docx"
    path.write_bytes(DOCUMENTS[name]())
    assert read_docx(path) == python_docx_view(path)
    text = parsers.extract_text(path, "docx")
    assert text == python_docx_read(path)
    assert text  # every document has text: an empty reading on both sides would prove nothing


RUN_TEXT = st.text(st.one_of(st.characters(exclude_categories=("Cs", "Cc")), st.sampled_from("\t\n ")), max_size=12)
STYLES = st.sampled_from([None, "Normal", "Title", "Heading 1", "Heading 2", "Heading 3", "Heading 9", "Quote",
                          "List Bullet", "Caption"])
BREAKS = st.sampled_from([None, WD_BREAK.LINE, WD_BREAK.PAGE, WD_BREAK.COLUMN])


@st.composite
def generated_documents(draw: st.DrawFn) -> object:
    """Paragraphs of runs and breaks in random styles, and tables with random merged rectangles."""
    document = docx.Document()
    for _ in range(draw(st.integers(0, 6))):
        paragraph = document.add_paragraph(style=draw(STYLES))
        for text, break_type in draw(st.lists(st.tuples(RUN_TEXT, BREAKS), max_size=4)):
            run = paragraph.add_run(text)
            if break_type is not None:
                run.add_break(break_type)
    for _ in range(draw(st.integers(0, 2))):
        rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        table = document.add_table(rows=rows, cols=cols)
        for r in range(rows):
            for c in range(cols):
                table.cell(r, c).text = draw(RUN_TEXT)
        for _ in range(draw(st.integers(0, 3))):
            corners = [draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1)),
                       draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))]
            try:
                table.cell(corners[0], corners[1]).merge(table.cell(corners[2], corners[3]))
            except Exception:  # python-docx refuses a merge across an earlier one; the table stays as it was
                pass
        document.add_paragraph(draw(RUN_TEXT))
    return document


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(document=generated_documents())
def test_generated_documents_read_as_python_docx_reads_them(document: object, tmp_path: Path) -> None:
    path = tmp_path / "generated.docx"
    path.write_bytes(saved(document))
    try:
        reference = python_docx_view(path)
    except ValueError:  # python-docx cannot follow some merges its own merge() writes: read as cells instead
        event("python-docx could not read a merge")
        assert read_docx(path).table_rows
        return
    assert read_docx(path) == reference
    assert parsers.extract_text(path, "docx") == python_docx_read(path)


def test_the_text_has_headings_tabs_breaks_links_and_merged_cells(tmp_path: Path) -> None:
    """What the comparisons above compare, spelled out once, so that a reader that drifted with python-docx
    would still be caught."""
    texts = {}
    for name in ("styled", "runs", "tables"):
        (tmp_path / name).write_bytes(DOCUMENTS[name]())
        texts[name] = parsers.extract_text(tmp_path / name, "docx")
    assert texts["styled"].startswith("# The Title\n\n# Heading at level 1\n\nBody under level 1.\n\n## Heading")
    assert "#### Custom heading four.\n\nUntyped style.\n\n###### First of two ids." in texts["styled"]
    assert "\n\nIn a custom style.\n\nNot a numbered heading.\n\n" in texts["styled"]
    assert texts["runs"].startswith(
        "Before a tabafter\ttabbed\nnew lineafter a page breaktext with\ttab and\nnewlineno-break\tptab\n"
        "  kept\n\nSee the linked\ttext for more.\n\nKept\n\n## Ünïcödé — 日本語 العربية 🦉 e\u0301")
    assert texts["tables"] == (
        "Before the tables.\n\nBetween the tables.\n\nAfter the tables.\n\n"
        "r0c0\nr0c1 | r0c0\nr0c1 | r0c2 | r0c3\n\n"
        "r1c0\nr2c0\nr3c0 | r1c1\nr1c2\nr2c1\nr2c2 | r1c1\nr1c2\nr2c1\nr2c2 | r1c3\n\n"
        "r1c0\nr2c0\nr3c0 | r1c1\nr1c2\nr2c1\nr2c2 | r1c1\nr1c2\nr2c1\nr2c2 | r2c3\n\n"
        "r1c0\nr2c0\nr3c0 | r3c1 | r3c2 | r3c3\n\n"
        "r4c0 | r4c1 |  | r4c3\nsecond paragraph\n\n"
        " | only one\n\n"
        "left | wide top | wide top\n\nwide top | wide top\n\na | wide top | wide top")


def test_the_reader_needs_neither_python_docx_nor_lxml(tmp_path: Path) -> None:
    path = tmp_path / "report.docx"
    path.write_bytes(styled())
    script = ("import sys; sys.modules['docx'] = sys.modules['lxml'] = None\n"
              "from pathlib import Path\nfrom kb_bridge.local_engine.ingest import parsers\n"
              "assert parsers.missing_parser('docx') is None\n"
              "print(parsers.extract_text(Path(sys.argv[1]), 'docx'))")
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == python_docx_read(path) + "\n"


def test_the_engine_extra_installs_no_docx_package_and_the_tests_keep_python_docx() -> None:
    config = configparser.ConfigParser()
    config.read(Path(__file__).parents[2] / "setup.cfg")
    extras = {name: [re.split(r"[<>=!;\[ ]", line.strip())[0].lower() for line in value.splitlines() if line.strip()]
              for name, value in config["options.extras_require"].items()}
    assert "pypdf" in extras["engine"] and not {"python-docx", "lxml"} & set(extras["engine"])
    assert "python-docx" in extras["test"]


BILLION_LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa">'
    + b"".join(b'<!ENTITY %c "&%c;&%c;&%c;&%c;&%c;&%c;&%c;&%c;&%c;&%c;">' % ((n,) + (n - 1,) * 10)
               for n in range(ord("b"), ord("k")))
    + b"]>\n<w:document " + W.encode() + b"><w:body><w:p><w:r><w:t>&j;</w:t></w:r></w:p></w:body></w:document>"
)


def hostile(name: str, tmp_path: Path) -> Path:
    """A hostile or wrong file, named .docx."""
    path = tmp_path / f"{name}.docx"
    if name == "doctype":
        path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": BILLION_LAUGHS}))
    elif name == "doctype_in_styles":
        path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/styles.xml": BILLION_LAUGHS}))
    elif name == "zip_bomb":
        write_zip_bomb(path, "word/document.xml", docx_text.MAX_PART_BYTES + 1)
    elif name == "malformed_xml":
        path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": b"<w:document><w:body>"}))
    elif name == "plain_zip":
        path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": None}))
    elif name == "text_file":
        path.write_text("just some text, named .docx\n")
    elif name == "many_entries":
        with zipfile.ZipFile(path, "w") as archive:
            for n in range(docx_text.MAX_ENTRIES + 1):
                archive.writestr(f"{n}", b"")
    elif name == "damaged":
        data = saved(_with_headings())
        at = data.rfind(b"PK\x01\x02", 0, data.rfind(b"PK\x05\x06"))  # the last central directory entry
        path.write_bytes(data[:at] + b"XX\x01\x02" + data[at + 4:])
    elif name == "password_protected":
        path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    return path


REFUSALS = {
    "doctype": "the DOCX file's word/document.xml has a DOCTYPE declaration, which is refused",
    "doctype_in_styles": "the DOCX file's word/styles.xml has a DOCTYPE declaration, which is refused",
    "zip_bomb": "the DOCX file's word/document.xml is over the limit of 128 MiB when decompressed",
    "malformed_xml": "could not read the docx file: unbound prefix",
    "plain_zip": "not a DOCX file: the zip archive has no word/document.xml",
    "text_file": "not a DOCX file: it is not a zip archive",
    "password_protected": "not a DOCX file: it is a password-protected DOCX or an old Word .doc",
    "many_entries": "not a DOCX file: its zip archive lists 10001 entries, more than the 10000",
    "damaged": "the DOCX file's zip archive is damaged: Bad magic number for central directory",
}


@pytest.mark.parametrize("name", REFUSALS)
def test_hostile_or_wrong_files_are_refused_saying_why(name: str, tmp_path: Path) -> None:
    path = hostile(name, tmp_path)
    with pytest.raises(IngestionError) as refused:
        parsers.extract_text(path, "docx")
    assert str(refused.value).startswith(REFUSALS[name])
    if name == "zip_bomb":
        assert path.stat().st_size < MiB  # small on disk, over the limit once decompressed


@pytest.mark.parametrize("name", REFUSALS)
def test_an_upload_of_such_a_file_fails_its_job_with_that_message(name: str, tmp_path: Path,
                                                                   client: FlaskClient) -> None:
    path = hostile(name, tmp_path)
    job = wait_job(client, upload(client, path.name, path.read_bytes()).json["id"])
    assert job["status"] == "failed" and job["error"].startswith(REFUSALS[name]), job


def test_a_declared_size_that_lies_stops_decompression_at_it(tmp_path: Path) -> None:
    """A part whose zip header declares fewer bytes than it holds: zipfile decompresses only what is declared
    (what docx_text.py relies on) and the job fails as damaged, not by reading on."""
    data = rewrite_zip(saved(_with_headings()), {"word/document.xml": b" " * (4 * MiB)})
    path = tmp_path / "liar.docx"
    path.write_bytes(declare_size(data, "word/document.xml", 1000))
    with pytest.raises(IngestionError, match="could not read the docx file: Bad CRC-32"):
        parsers.extract_text(path, "docx")


def test_merged_cells_cannot_repeat_a_text_past_the_limit(tmp_path: Path) -> None:
    """A cell merged down many rows is repeated in each (as python-docx does): the text counted is bounded."""
    rows = 140
    big = "x" * MiB
    body = ("<w:tbl><w:tblGrid><w:gridCol/></w:tblGrid>"
            f'<w:tr><w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p><w:r><w:t>{big}</w:t></w:r></w:p>'
            "</w:tc></w:tr>" + "<w:tr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc></w:tr>" * rows + "</w:tbl>")
    document = f"<w:document {W}><w:body>{body}</w:body></w:document>".encode()
    path = tmp_path / "repeats.docx"
    path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": document}))
    assert path.stat().st_size < MiB
    with pytest.raises(IngestionError, match="the DOCX file's text is over the limit of 128 MiB"):
        read_docx(path)


def test_a_cell_spanning_more_than_word_allows_is_repeated_63_times(tmp_path: Path) -> None:
    document = (f'<w:document {W}><w:body><w:tbl><w:tr><w:tc><w:tcPr><w:gridSpan w:val="1000000000"/></w:tcPr>'
                "<w:p><w:r><w:t>wide</w:t></w:r></w:p></w:tc></w:tr></w:tbl></w:body></w:document>").encode()
    path = tmp_path / "wide.docx"
    path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": document}))
    assert read_docx(path).table_rows == [["wide"] * docx_text.MAX_GRID_SPAN]


def test_merges_python_docx_cannot_follow_are_read_as_cells(tmp_path: Path) -> None:
    """A continuation in a table's first row, or with no cell starting at its column above: python-docx raised
    (the old reader failed the whole file); the continuation is read as a cell of its own."""
    document = (f"<w:document {W}><w:body><w:tbl>"
                "<w:tr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p><w:r><w:t>first</w:t></w:r></w:p></w:tc>"
                '<w:tc><w:tcPr><w:gridSpan w:val="2"/></w:tcPr><w:p><w:r><w:t>wide</w:t></w:r></w:p></w:tc></w:tr>'
                "<w:tr><w:tc><w:p/></w:tc><w:tc><w:p/></w:tc><w:tc><w:tcPr><w:vMerge/></w:tcPr>"
                "<w:p><w:r><w:t>under the middle of wide</w:t></w:r></w:p></w:tc></w:tr>"
                "</w:tbl></w:body></w:document>").encode()
    path = tmp_path / "odd.docx"
    path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": document}))
    with pytest.raises(ValueError, match="no tr above"):
        python_docx_view(path)
    assert read_docx(path).table_rows == [["first", "wide", "wide"], ["", "", "under the middle of wide"]]
    assert parsers.extract_text(path, "docx") == "first | wide | wide\n\n |  | under the middle of wide"


def test_a_paragraph_of_too_many_elements_is_refused(tmp_path: Path) -> None:
    """Memory holds one paragraph or row at a time: one that would be a tree of gigabytes is refused."""
    runs = "<w:r/>" * (docx_text.MAX_OPEN_ELEMENTS + 1)
    document = f"<w:document {W}><w:body><w:p>{runs}</w:p></w:body></w:document>".encode()
    path = tmp_path / "long.docx"
    path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": document}))
    with pytest.raises(IngestionError, match="has a paragraph or table row of over 500,000 XML elements"):
        read_docx(path)
    fewer = f"<w:document {W}><w:body><w:p>{runs[:-6 * 10]}<w:r><w:t>end</w:t></w:r></w:p></w:body></w:document>"
    path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": fewer.encode()}))
    assert read_docx(path).paragraphs == [("Normal", "end")]


def test_wide_merged_rows_are_read_in_one_pass(tmp_path: Path) -> None:
    """Each continuation finds the cell above by its grid offset at once: rows of 50,000 cells, each merged
    with the cell above, are read (scanning the row above for each cell would be over a billion steps)."""
    cells = 50_000
    first = "".join(f'<w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p><w:r><w:t>{n}</w:t></w:r></w:p></w:tc>'
                    for n in range(cells))
    second = "<w:tc><w:tcPr><w:vMerge/></w:tcPr></w:tc>" * cells
    document = f"<w:document {W}><w:body><w:tbl><w:tr>{first}</w:tr><w:tr>{second}</w:tr></w:tbl></w:body></w:document>"
    path = tmp_path / "wide_merged.docx"
    path.write_bytes(rewrite_zip(saved(_with_headings()), {"word/document.xml": document.encode()}))
    rows = read_docx(path).table_rows
    assert rows[0] == rows[1] == [str(n) for n in range(cells)]


def test_a_style_without_a_name_is_no_heading(tmp_path: Path) -> None:
    """python-docx names it None (the old reader then failed the whole file); it is read as plain text."""
    document = docx.Document()
    document.styles.element.append(parse_xml(f'<w:style {W} w:type="paragraph" w:styleId="Nameless"/>'))
    paragraph = document.add_paragraph("In a nameless style.")
    paragraph._p.get_or_add_pPr().append(parse_xml(f'<w:pStyle {W} w:val="Nameless"/>'))
    path = tmp_path / "nameless.docx"
    path.write_bytes(saved(document))
    assert read_docx(path) == python_docx_view(path)
    assert read_docx(path).paragraphs == [(None, "In a nameless style.")]
    assert parsers.extract_text(path, "docx") == "In a nameless style."
