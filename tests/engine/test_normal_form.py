"""The full-text index's normal form and the way back to the stored text (store/normal_form.py)."""

from __future__ import annotations

import re
import unicodedata

import pytest

from kb_bridge.local_engine.store.normal_form import Folded, normal

NFD = "NFD"


@pytest.mark.parametrize("text", [
    "plain ASCII text stays as it is",
    "the ﬁle and the ﬂow",
    unicodedata.normalize(NFD, "résumé, naïve café in Zürich"),
    "mixed: ﬁne " + unicodedata.normalize(NFD, "crème") + " Ｔｏｋｙｏ ½ x²",
    unicodedata.normalize(NFD, "한국어 텍스트"),  # Hangul decomposed into jamo
    "\u0301 a text that opens with a combining accent",
])
def test_every_word_of_the_normal_form_maps_back_to_the_stored_characters_it_came_from(text: str) -> None:
    folded = Folded.of(text)
    assert folded.folded == normal(text)
    for word in re.finditer(r"\w+", folded.folded):
        start, end = folded.start_in_text(word.start()), folded.end_in_text(word.end())
        assert 0 <= start < end <= len(text)
        # The stored characters of the word read, in normal form, as the word (and perhaps a neighbouring
        # accent that the normal form composed into it).
        assert word.group() in normal(text[start:end])
    assert folded.start_in_text(len(folded.folded)) == len(text) and folded.end_in_text(0) == 0


def test_a_text_already_in_normal_form_maps_each_offset_to_itself() -> None:
    folded = Folded.of("nothing to fold here")
    assert folded.folded == folded.text
    assert [folded.start_in_text(i) for i in range(5)] == [0, 1, 2, 3, 4]
    assert folded.end_in_text(7) == 7


def test_a_ligature_maps_back_whole() -> None:
    folded = Folded.of("a ﬁle")
    assert folded.folded == "a file"
    # "file" in the normal form is characters 2-6; in the stored text, "ﬁle" is 2-5.
    assert (folded.start_in_text(2), folded.end_in_text(6)) == (2, 5)
    # Half of the ligature maps to all of it.
    assert (folded.start_in_text(3), folded.end_in_text(3)) == (2, 3)


def test_ascii_around_a_folded_stretch_maps_character_by_character() -> None:
    text = "the ﬁle " + unicodedata.normalize(NFD, "café") + " ok"
    folded = Folded.of(text)
    assert folded.folded == "the file café ok"
    assert [folded.start_in_text(i) for i in (0, 1, 4, 5, 8)] == [0, 1, 4, 4, 7]
    cafe = folded.folded.index("café")
    assert text[folded.start_in_text(cafe):folded.end_in_text(cafe + 4)] == unicodedata.normalize(NFD, "café")
    assert text[folded.start_in_text(len(folded.folded) - 2):] == "ok"
