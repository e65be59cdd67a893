"""A model's tensors by name, each produced only when asked for."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")


class LazyWeights(Mapping[str, V], Generic[V]):
    """Names known up front (``self._where``: name → where the tensor lives); subclasses read a
    tensor in ``__getitem__``. Membership, iteration and length never read one."""

    _where: Mapping[str, object]

    def __contains__(self, name: object) -> bool:  # (Mapping's default would read the tensor)
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)
