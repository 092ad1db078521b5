"""The secret type: API keys, tokens and the metrics token are held as `Secret`s from the moment the
settings reader reads them."""

from __future__ import annotations


class Secret:
    """A string that never shows itself in a repr, a log line or an f-string by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
