"""The Queue's filter (`/`): words that must all match somewhere in a run's row (any case),
`-word` for words that must not, and `column:value` for a value in one column
(`state:running`, `model:resnet32`; a prefix is enough: `state:run`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RowFilter:
    wanted: tuple[str, ...] = ()
    unwanted: tuple[str, ...] = ()
    columns: tuple[tuple[int, str], ...] = ()  # (column index, prefix of its value)

    @classmethod
    def parse(cls, text: str, columns: Sequence[str]) -> RowFilter:
        """`columns` are the row's cells' names, in their order (QUEUE_COLUMNS)."""
        wanted, unwanted, by_column = [], [], []
        at = {name.lower(): i for i, name in enumerate(columns)}
        for word in text.lower().split():
            name, colon, value = word.partition(":")
            if word.startswith("-") and len(word) > 1:
                unwanted.append(word[1:])
            elif colon and name in at and value:
                by_column.append((at[name], value))
            else:
                wanted.append(word)
        return cls(tuple(wanted), tuple(unwanted), tuple(by_column))

    def __bool__(self) -> bool:
        return bool(self.wanted or self.unwanted or self.columns)

    def matches(self, cells: Sequence[str]) -> bool:
        lowered = [c.lower() for c in cells]
        return (
            all(any(w in c for c in lowered) for w in self.wanted)
            and not any(any(w in c for c in lowered) for w in self.unwanted)
            and all(lowered[i].startswith(v) for i, v in self.columns)
        )
