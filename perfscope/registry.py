"""The registries of knobs, rules and charts: an ordered list that a plugin (or a test) adds to at run time.

    REGISTRY = Registry([AmpBf16(), Tf32()], key=lambda k: k.id, what="knob")
    REGISTRY.register(MyKnob())              # after the built-in ones; a second one with the same key is refused
    with REGISTRY.registered(MyKnob()): ...  # for the length of a block (tests): nothing leaks

One class so the three registries refuse, add and undo the same way; a list, so every reader iterates it as before.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(list[T], Generic[T]):
    """``key``: what no two entries share; ``what``: the entry's name in an error; ``check``: raises on an entry that
    cannot be registered (a rule without its documentation), so the error comes at registration, not later."""

    def __init__(self, items: Iterable[T], *, key: Callable[[T], Hashable], what: str,
                 check: Callable[[T], None] | None = None) -> None:
        super().__init__(items)
        self.key, self.what, self.check = key, what, check

    def register(self, new: T) -> None:
        """Add ``new`` after the entries already registered."""
        if self.key(new) in {self.key(entry) for entry in self}:
            raise ValueError(f"a {self.what} {self.key(new)!r} is already registered")
        if self.check is not None:
            self.check(new)
        self.append(new)

    def get(self, key: Hashable) -> T:
        """The entry whose key is ``key`` (KeyError when none is)."""
        for entry in self:
            if self.key(entry) == key:
                return entry
        raise KeyError(key)

    @contextmanager
    def registered(self, new: T) -> Iterator[T]:
        """`register` for the length of a block."""
        self.register(new)
        try:
            yield new
        finally:
            del self[next(i for i, entry in enumerate(self) if entry is new)]
