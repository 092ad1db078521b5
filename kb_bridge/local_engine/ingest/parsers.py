"""Uploaded files into text, one function per file type.

HTML goes through the standard library's `html.parser`: it is lenient with broken markup, needs no
dependency, and visible text is all we want (BeautifulSoup would add a dependency for the same result).
PDF uses pypdf (the `engine` extra); a type whose parser is not installed is refused at upload time (415),
not accepted and failed later. DOCX is read with the standard library (docx_text.py), as python-docx read it.
"""

from __future__ import annotations

import html.parser
import importlib.util
import logging
import re
from collections.abc import Callable
from pathlib import Path

from ..errors import IngestionError
from .docx_text import read_docx

logger = logging.getLogger(__name__)

_WHITESPACE = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")

# File extension -> doc_type.
EXTENSIONS = {
    "txt": "txt",
    "text": "txt",
    "md": "md",
    "markdown": "md",
    "html": "html",
    "htm": "html",
    "pdf": "pdf",
    "docx": "docx",
}
# doc_type -> the module its parser needs, for types that need one.
_REQUIRED_MODULE = {"pdf": "pypdf"}
_PACKAGE_OF_MODULE = {"pypdf": "pypdf"}


def doc_type_for(filename: str) -> str | None:
    """The doc_type of a file name by its extension, or None when the type is not supported."""
    suffix = Path(filename).suffix.lower().lstrip(".")
    return EXTENSIONS.get(suffix)


def missing_parser(doc_type: str) -> str | None:
    """The package to install for this doc_type, when its parser is not importable."""
    module = _REQUIRED_MODULE.get(doc_type)
    if module and importlib.util.find_spec(module) is None:
        return _PACKAGE_OF_MODULE[module]
    return None


def extract_text(path: Path, doc_type: str) -> str:
    """The file's text, without NUL characters (U+0000): PostgreSQL text cannot hold them, and a text file
    with a few binary bytes (a log, a dump) should be ingested on both stores alike, not fail on one."""
    parser = _PARSERS.get(doc_type)
    if parser is None:
        raise IngestionError(f"no parser for file type {doc_type!r}")
    try:
        return parser(path).replace("\x00", "")
    except (IngestionError, MemoryError):  # MemoryError: over the reader's memory limit (file_reader.py)
        raise
    except Exception as exc:  # parsers raise many types on malformed files; all mean "unreadable"
        logger.info("could not read %s file %s: %r", doc_type, path.name, exc)
        raise IngestionError(f"could not read the {doc_type} file: {exc}") from exc


def decode_text(data: bytes) -> str:
    """Bytes of a text file into str: UTF-8 (with or without BOM), UTF-16 with BOM, else Windows-1252."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _read_text(path: Path) -> str:
    return decode_text(path.read_bytes())


def _read_html(path: Path) -> str:
    extractor = _HtmlText()
    extractor.feed(decode_text(path.read_bytes()))
    extractor.close()
    return extractor.text()


def _read_pdf(path: Path) -> str:
    import pypdf

    reader = pypdf.PdfReader(path)
    if reader.is_encrypted and not reader.decrypt(""):
        raise IngestionError("the PDF is encrypted with a password")
    pages = [page.extract_text() or "" for page in reader.pages]
    return "\n\n".join(page.strip() for page in pages if page.strip())


def _read_docx(path: Path) -> str:
    """The body's paragraphs (Word headings as Markdown ones), then each table row as "cell | cell"."""
    docx = read_docx(path, keep_empty=False)
    blocks: list[str] = []
    for style_name, paragraph in docx.paragraphs:
        text = paragraph.strip()
        if not text:
            continue
        level = _heading_level(style_name or "")
        blocks.append(f"{'#' * level} {text}" if level else text)
    for row in docx.table_rows:
        cells = [cell.strip() for cell in row]
        if any(cells):
            blocks.append(" | ".join(cells))
    return "\n\n".join(blocks)


def _heading_level(style_name: str) -> int:
    """Word's "Heading 2" -> 2, "Title" -> 1, anything else -> 0: so the chunker sees Markdown headings."""
    if style_name == "Title":
        return 1
    if style_name.startswith("Heading "):
        suffix = style_name.removeprefix("Heading ")
        if suffix.isdigit():
            return min(int(suffix), 6)
    return 0


class _HtmlText(html.parser.HTMLParser):
    """Collects visible text; block elements become paragraph breaks, h1–h6 become Markdown headings."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "head", "svg"})
    _BLOCK = frozenset(
        {"p", "div", "section", "article", "br", "li", "tr", "table", "ul", "ol", "pre", "blockquote",
         "header", "footer", "main", "nav", "aside", "dd", "dt", "figcaption", "hr"}
    )
    _HEADINGS = {f"h{n}": n for n in range(1, 7)}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._skip_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip_depth += 1
        elif tag in self._HEADINGS:
            self._parts.append("\n\n" + "#" * self._HEADINGS[tag] + " ")
        elif tag in self._BLOCK:
            self._parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in self._HEADINGS or tag in self._BLOCK:
            self._parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self._skip_depth:
            self._parts.append(_WHITESPACE.sub(" ", data))

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        """`<![` not followed by a name (`<![ x`, `<![1`) is a bogus comment up to the next `>`, as browsers
        read it; the standard library's _markupbase raised AssertionError and failed the whole document."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i + 3)
            return -1 if end < 0 else end + 1  # -1: at close, the parser keeps the rest as text

    def text(self) -> str:
        lines = (line.strip() for line in "".join(self._parts).split("\n"))
        return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


_PARSERS: dict[str, Callable[[Path], str]] = {
    "txt": _read_text,
    "md": _read_text,
    "html": _read_html,
    "pdf": _read_pdf,
    "docx": _read_docx,
}
