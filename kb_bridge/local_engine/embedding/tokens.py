"""Texts to the model's inputs, as sentence-transformers makes them, with embedding/wordpiece.py.

The model package's tokenizer.json says "truncate at 128, pad to 128" (what it was trained with);
sentence-transformers overrides both: it truncates at sentence_bert_config.json's `max_seq_length` (256)
and pads a batch to its longest text. So do we, or long chunks would lose half their words and short
batches would carry 128 tokens of padding.

The tokenizer is pure Python and gives the `tokenizers` library's ids, id for id (the tests check it against
that library, which only the `test` extra installs). Its only state after loading is a word cache whose
single dict operations are atomic, so one tokenizer serves every document worker and the query thread.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .wordpiece import WordPieceTokenizer

if TYPE_CHECKING:
    import numpy as np


def max_seq_length(model_dir: Path) -> int:
    """Tokens per text the model sees (sentence_bert_config.json; the position table's size without it)."""
    settings = model_dir / "sentence_bert_config.json"
    if settings.is_file():
        return int(json.loads(settings.read_text(encoding="utf-8"))["max_seq_length"])
    return int(json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["max_position_embeddings"])


def load_tokenizer(model_dir: Path) -> WordPieceTokenizer:
    """The model's tokenizer, truncating at its max_seq_length and not padding (`padded` pads)."""
    return WordPieceTokenizer.from_file(model_dir / "tokenizer.json", max_seq_length(model_dir))


def token_ids(tokenizer: WordPieceTokenizer, texts: Sequence[str]) -> list[list[int]]:
    # A 1,000-character chunk takes ~0.2 ms here (bench/tokenizer.py) against ~60 ms in the model.
    return [tokenizer.encode(text) for text in texts]


def padded(ids: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), int64, padded on the right to the longest of `ids`."""
    import numpy as np

    width = max((len(row) for row in ids), default=0)
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for index, row in enumerate(ids):
        input_ids[index, : len(row)] = row
        mask[index, : len(row)] = 1
    return input_ids, mask
