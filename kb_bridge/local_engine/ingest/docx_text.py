"""The text of a DOCX file, read with the standard library (zipfile, xml.etree) as python-docx reads it.

What it gives is what python-docx 1.2 gives for the same file: `document.paragraphs` (each `w:p` directly
under `w:body`) with `paragraph.text` and `paragraph.style.name`, then `document.tables` (each `w:tbl`
directly under `w:body`) row by row with `row.cells` and `cell.text`. python-docx stays in the `test` extra
as the reference (tests/engine/test_engine_docx_text.py); the engine no longer needs it, nor lxml under it.

The file is an upload, so any file: an archive listing more than MAX_ENTRIES entries, or whose list of
entries (the central directory) is over MAX_DIRECTORY_BYTES, is refused before zipfile reads the list, a part that would decompress past MAX_PART_BYTES is refused (a zip bomb), a DOCTYPE is refused before its declarations are read (entity expansion; expat never fetches
external entities), and each part is parsed as it is decompressed, the document handed over one paragraph
or table row at a time and then dropped, so memory holds one block, not the document's tree (and a block of
over MAX_OPEN_ELEMENTS elements is refused).
"""

from __future__ import annotations

import dataclasses
import posixpath
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path

from ..errors import IngestionError

MiB = 1024 * 1024
# The most a part of the file (word/document.xml, its styles, a relationships list) may decompress to, and
# the most text the file may give. Far above real documents (20,000 paragraphs and a 3,000-row table make
# 7 MiB of document.xml) and far below what a zip bomb expands to; a part is parsed as it is decompressed,
# so memory does not grow with it.
MAX_PART_BYTES = 128 * MiB
# Word's widest table has 63 columns: a cell spanning more is damaged or hostile (python-docx would repeat
# it that many times in its row).
MAX_GRID_SPAN = 63
# zipfile reads the whole list of entries into memory when it opens an archive: a few hundred bytes each, so
# an upload of nothing but entries (13 million in 600 MiB) would take gigabytes. A DOCX has tens of parts, a
# few thousand with every image of a long book.
MAX_ENTRIES = 10_000
# zipfile reads the central directory by its size in the end record, not by the entry count there: an end
# record saying 1 entry over a directory of a million (53 MB) took 6 s and 476 MiB before the count was
# checked. An entry takes 46 bytes and its name (plus extra fields): 10,000 entries of long names stay far
# below this.
MAX_DIRECTORY_BYTES = 8 * MiB
# The most paragraphs and table rows with text the engine keeps of one file: a book of a thousand pages
# has tens of thousands. Each kept block costs a hundred bytes or more, so a file of nothing but tiny
# paragraphs (a few bytes each once compressed) is refused here rather than growing to gigabytes.
MAX_BLOCKS = 1_000_000
# The most elements a part's tree may hold at once: one paragraph or table row and what is still open around
# it (each element takes a few hundred bytes). A real paragraph has tens to thousands; without a bound, one
# paragraph of MAX_PART_BYTES would be a tree of gigabytes.
MAX_OPEN_ELEMENTS = 500_000
_CHUNK_BYTES = 64 * 1024
# An encrypted (password-protected) DOCX and an old .doc are OLE compound files, not zip archives.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_RT = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
_MAIN_DOCUMENT = "word/document.xml"
# A run's children that have text, as python-docx's run.text reads them (its CT_R.text);
# w:br is a line break ("\n") only when its type is textWrapping, the default.
_RUN_TEXT = {f"{_W}tab": "\t", f"{_W}ptab": "\t", f"{_W}cr": "\n", f"{_W}noBreakHyphen": "-"}
# Built-in style names as Word stores them -> as python-docx shows them (its BabelFish).
_UI_STYLE_NAMES = {"caption": "Caption", "footer": "Footer", "header": "Header",
                   **{f"heading {n}": f"Heading {n}" for n in range(1, 10)}}


@dataclasses.dataclass
class DocxText:
    """The body's paragraphs as (style name or None, text), then its tables' rows as lists of cell texts."""

    paragraphs: list[tuple[str | None, str]] = dataclasses.field(default_factory=list)
    table_rows: list[list[str]] = dataclasses.field(default_factory=list)


def read_docx(path: Path, keep_empty: bool = True) -> DocxText:
    """The text of a DOCX file; IngestionError when it is not one or is refused (module docstring).

    `keep_empty` False leaves out paragraphs and rows without text (the engine's reader, parsers.py, drops
    them anyway): 22 million empty paragraphs are a 195 KB file and 1.5 GiB of (style, "") pairs."""
    with path.open("rb") as file:
        try:
            # zipfile's own reader of the archive's end record: the count it gives is the one zipfile acts on.
            end = zipfile._EndRecData(file)  # type: ignore[attr-defined]
        except zipfile.BadZipFile as exc:
            raise IngestionError(f"the DOCX file's zip archive is damaged: {exc}") from None
        if end is None:
            file.seek(0)
            ole = file.read(len(_OLE_MAGIC)) == _OLE_MAGIC
            raise IngestionError(
                "not a DOCX file: it is a password-protected DOCX or an old Word .doc (save it as .docx without "
                "a password)" if ole else "not a DOCX file: it is not a zip archive")
        entries = end[zipfile._ECD_ENTRIES_TOTAL]  # type: ignore[attr-defined]
        if entries > MAX_ENTRIES:
            raise IngestionError(f"not a DOCX file: its zip archive lists {entries} entries, more than the "
                                 f"{MAX_ENTRIES} a DOCX file could need")
        directory = end[zipfile._ECD_SIZE]  # type: ignore[attr-defined]
        if directory > MAX_DIRECTORY_BYTES:
            raise IngestionError(f"not a DOCX file: its zip archive's list of entries takes {directory} bytes, "
                                 f"more than the {MAX_DIRECTORY_BYTES // MiB} MiB a DOCX file could need")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise IngestionError(f"the DOCX file's zip archive is damaged: {exc}") from None
    with archive:
        main = _related(archive, "", "officeDocument") or _MAIN_DOCUMENT
        if main not in archive.NameToInfo:
            raise IngestionError(f"not a DOCX file: the zip archive has no {main}")
        styles = _read_styles(archive, _related(archive, main, "styles"))
        reader = _BodyReader(styles, keep_empty)
        _parse(archive, main, reader.take)
        return reader.text


def _related(archive: zipfile.ZipFile, source: str, kind: str) -> str | None:
    """The part `source` ("" for the package) names as its relationship of this kind, if it has one."""
    directory, name = posixpath.split(source)
    rels = posixpath.join(directory, "_rels", f"{name}.rels")
    if rels not in archive.NameToInfo:
        return None
    targets: list[str] = []

    def take(element: ET.Element, open_elements: list[ET.Element]) -> bool:
        if (len(open_elements) == 1 and element.tag == _REL and element.get("Type") == _RT + kind
                and element.get("TargetMode") != "External"):
            targets.append(element.get("Target", ""))
        return True

    _parse(archive, rels, take)
    if not targets:
        return None
    target = targets[0]
    return posixpath.normpath(target.lstrip("/") if target.startswith("/") else posixpath.join(directory, target))


@dataclasses.dataclass
class _Styles:
    """Paragraph styles' names by id, and the default paragraph style's name (w:styles in styles.xml)."""

    names: dict[str, str | None] = dataclasses.field(default_factory=dict)
    default: str | None = None

    def name_of(self, style_id: str | None) -> str | None:
        """As python-docx's paragraph.style.name: an id that names no paragraph style means the default."""
        if style_id and style_id in self.names:
            return self.names[style_id]
        return self.default


def _read_styles(archive: zipfile.ZipFile, part: str | None) -> _Styles:
    if part is None or part not in archive.NameToInfo:
        # python-docx then uses the styles of its own template, where Normal, the default, is the one
        # paragraph style.
        return _Styles({"Normal": "Normal"}, default="Normal")
    styles = _Styles()
    seen: set[str] = set()

    def take(element: ET.Element, open_elements: list[ET.Element]) -> bool:
        if len(open_elements) != 1 or element.tag != f"{_W}style":
            return len(open_elements) == 1 or open_elements[1].tag != f"{_W}style"  # keep a style's inside
        style_id = element.get(f"{_W}styleId")
        name_element = element.find(f"{_W}name")
        name = None if name_element is None else name_element.get(f"{_W}val")
        name = _UI_STYLE_NAMES.get(name, name) if name is not None else None
        if style_id is not None and style_id not in seen:  # python-docx takes the first of an id
            seen.add(style_id)
            if element.get(f"{_W}type") == "paragraph":
                styles.names[style_id] = name
        if element.get(f"{_W}type") == "paragraph" and element.get(f"{_W}default") in ("1", "true", "on"):
            styles.default = name  # the last default one, as the spec and python-docx say
        return True

    _parse(archive, part, take)
    return styles


class _BodyReader:
    """Takes word/document.xml's elements as they end: the first w:body's paragraphs, and its tables' rows."""

    def __init__(self, styles: _Styles, keep_empty: bool = True) -> None:
        self.text = DocxText()
        self._styles = styles
        self._keep_empty = keep_empty
        self._blocks = 0
        self._chars = 0
        self._body_done = False
        self._table: ET.Element | None = None
        self._row_above: _Row | None = None

    def take(self, element: ET.Element, open_elements: list[ET.Element]) -> bool:
        """Reads each body paragraph and body table row as it ends. True drops the element: all but those
        inside a paragraph or row still being built, so that memory holds one block whatever the file."""
        depth = len(open_elements)
        if depth == 1 and element.tag == f"{_W}body" and open_elements[0].tag == f"{_W}document":
            self._body_done = True  # python-docx reads the first w:body only
        if (depth < 2 or self._body_done or open_elements[0].tag != f"{_W}document"
                or open_elements[1].tag != f"{_W}body"):
            return True
        if depth == 2:
            if element.tag == f"{_W}p":
                text = self._counted(_paragraph_text(element))
                if self._kept(bool(text.strip())):
                    style_id = _val(_first(element, "pPr", "pStyle"))
                    self.text.paragraphs.append((self._styles.name_of(style_id), text))
            return True
        block = open_elements[2]
        if block.tag == f"{_W}p":
            return False  # inside a body paragraph
        if block.tag != f"{_W}tbl":
            return True
        if depth == 3:
            if element.tag == f"{_W}tr":
                if block is not self._table:  # a table's first row: nothing is above it
                    self._table, self._row_above = block, None
                self._row_above = self._read_row(element)
            return True
        return open_elements[3].tag != f"{_W}tr"  # inside a row of a body table: kept until the row is read

    def _read_row(self, tr: ET.Element) -> _Row:
        """python-docx's row.cells: a cell once per grid column it spans, and a vertically
        merged cell's continuation as the cell it continues, found at the same grid offset in the row above."""
        row = _Row()
        offset = _int(_val(_first(tr, "trPr", "gridBefore")), 0)
        shown: list[str] = []
        for tc in tr.findall(f"{_W}tc"):
            # A negative span (damaged) counts as none, so that grid offsets only grow along a row.
            span = max(0, min(_int(_val(_first(tc, "tcPr", "gridSpan")), 1), MAX_GRID_SPAN))
            merge = _first(tc, "tcPr", "vMerge")
            above = None
            if merge is not None and merge.get(f"{_W}val", "continue") == "continue" and self._row_above:
                # The cell of the row above that starts at this grid offset (CT_Row.tc_at_grid_offset). None
                # where python-docx raises (a table's first row, no cell starting there): then it is a cell.
                above = self._row_above.starts.get(offset)
            if above is not None:
                cell = _Cell(above.text, above.shown_span)
            else:
                cell = _Cell("\n".join(_paragraph_text(p) for p in tc.findall(f"{_W}p")), span)
            row.starts.setdefault(offset, cell)  # the first of cells sharing an offset, as python-docx finds
            offset += span
            for _ in range(cell.shown_span):
                shown.append(self._counted(cell.text))
        if self._kept(any(cell.strip() for cell in shown)):
            self.text.table_rows.append(shown)
        return row

    def _kept(self, has_text: bool) -> bool:
        """Whether to keep a block, counting it against MAX_BLOCKS if so."""
        if not (has_text or self._keep_empty):
            return False
        self._blocks += 1
        if self._blocks > MAX_BLOCKS:
            raise IngestionError(f"the DOCX file has over {MAX_BLOCKS:,} paragraphs and table rows, the limit")
        return True

    def _counted(self, text: str) -> str:
        """The text, once it is counted against the limit: merged cells repeat theirs, so a small file could
        otherwise give gigabytes."""
        self._chars += len(text) + 1
        if self._chars > MAX_PART_BYTES:
            raise IngestionError(f"the DOCX file's text is over the limit of {MAX_PART_BYTES // MiB} MiB")
        return text


@dataclasses.dataclass
class _Cell:
    text: str  # the text of the cell it shows: its own, or for a merged continuation the first cell's
    shown_span: int  # how many times row.cells repeats it: the span of the cell whose text it shows


@dataclasses.dataclass
class _Row:
    starts: dict[int, _Cell] = dataclasses.field(default_factory=dict)  # by the grid offset each starts at


def _paragraph_text(p: ET.Element) -> str:
    """python-docx's paragraph.text: its runs and its hyperlinks' runs (direct children only)."""
    parts: list[str] = []
    for child in p:
        if child.tag == f"{_W}r":
            parts.append(_run_text(child))
        elif child.tag == f"{_W}hyperlink":
            parts.extend(_run_text(run) for run in child.findall(f"{_W}r"))
    return "".join(parts)


def _run_text(r: ET.Element) -> str:
    parts: list[str] = []
    for child in r:
        if child.tag == f"{_W}t":
            parts.append(child.text or "")
        elif child.tag == f"{_W}br":
            parts.append("\n" if child.get(f"{_W}type", "textWrapping") == "textWrapping" else "")
        else:
            parts.append(_RUN_TEXT.get(child.tag, ""))
    return "".join(parts)


def _first(element: ET.Element | None, *path: str) -> ET.Element | None:
    """The first child of each name in turn (python-docx's ZeroOrOne properties), or None."""
    for name in path:
        if element is None:
            return None
        element = element.find(f"{_W}{name}")
    return element


def _val(element: ET.Element | None) -> str | None:
    return None if element is None else element.get(f"{_W}val")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


class _Streamed(ET.TreeBuilder):
    """Builds a part's tree, handing each element to `take` as it ends with the elements still open around
    it; what `take` returns True for is dropped from its parent, so memory holds what is still open."""

    def __init__(self, part: str, take: Callable[[ET.Element, list[ET.Element]], bool]) -> None:
        super().__init__()
        self._part = part
        self._take = take
        self._open: list[ET.Element] = []
        self._sizes: list[int] = []  # how many elements each open element's tree holds so far, itself included
        self._held = 0

    def doctype(self, name: str, pubid: str | None, system: str | None) -> None:
        # Called at the DOCTYPE's start, before any of its declarations is read. Word never writes one.
        raise IngestionError(f"the DOCX file's {self._part} has a DOCTYPE declaration, which is refused "
                             "(its entities could expand without bound)")

    def start(self, tag: str, attrs: dict[str, str], /) -> ET.Element:
        element = super().start(tag, attrs)
        self._open.append(element)
        self._sizes.append(1)
        self._held += 1
        if self._held > MAX_OPEN_ELEMENTS:
            raise IngestionError(f"the DOCX file's {self._part} has a paragraph or table row of over "
                                 f"{MAX_OPEN_ELEMENTS:,} XML elements, the limit")
        return element

    def end(self, tag: str, /) -> ET.Element:
        element = super().end(tag)
        self._open.pop()
        size = self._sizes.pop()
        if self._open and self._take(element, self._open):
            self._open[-1].remove(element)
            self._held -= size
        elif self._sizes:
            self._sizes[-1] += size
        return element


def _parse(archive: zipfile.ZipFile, part: str,
           take: Callable[[ET.Element, list[ET.Element]], bool]) -> None:
    """Streams one part of the archive through the XML parser, a piece at a time: a DOCTYPE at its start is
    refused before the rest is decompressed or parsed."""
    info = archive.getinfo(part)
    # zipfile never decompresses past the size the archive declares (a part that would is "Bad CRC-32"), so
    # checking the declared size bounds what is decompressed.
    if info.file_size > MAX_PART_BYTES:
        raise IngestionError(f"the DOCX file's {part} is over the limit of {MAX_PART_BYTES // MiB} MiB when "
                             "decompressed")
    parser = ET.XMLParser(target=_Streamed(part, take))
    with archive.open(info) as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            parser.feed(chunk)
    parser.close()
