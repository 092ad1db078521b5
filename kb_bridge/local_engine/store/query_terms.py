"""A user's query as search words: the same words for every full-text backend.

User queries never reach a full-text engine as syntax. They are cut into word tokens (without duplicates,
ignoring case: the index's analyzer lower-cases them); common English function words are dropped when the
query has other words ("to be or not to be" still searches for itself); at most MAX_TERMS words are kept.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32

# Function words that match nearly every chunk: they cost time and add nothing to BM25's ranking.
STOPWORDS = frozenset(
    """a about an and are as at be by can could did do does for from had has have how i if in into is it its
    me my no not of on or our she should so than that the their them then there these they this to was we
    were what when where which who why will with would you your""".split()
)


def query_words(query: str) -> list[str]:
    """The query's searchable words, in order, without duplicates (ignoring case), as the query wrote them.

    Not lower-cased here: the full-text analyzer lower-cases them as it does the indexed text, and Python's
    lower() differs from it. "İstanbul" became "i̇stanbul", whose combining dot the analyzer split off
    ("i", "stanbul"), and "ΟΔΟΣ" took a final sigma ("οδος") the index, lowering letter by letter, had not
    ("οδοσ"): a query for a word exactly as a document wrote it did not find that document."""
    found: dict[str, str] = {}
    for token in _TOKEN.findall(query):
        found.setdefault(token.lower(), token)
    words = [token for lowered, token in found.items() if lowered not in STOPWORDS] or list(found.values())
    return words[:MAX_TERMS]
