"""What the hooks count per optimizer step of the user's loop: batches, micro-steps, samples — and their spread.
Design notes: docs/hooks.md."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfscope.measure.tokens import leading_dim

if TYPE_CHECKING:  # not imported at run time: `import perfscope.hooks` stays light (no results model)
    from perfscope.measure.window import StepRecord


def most_common(counter: Counter[int]) -> int | None:
    return counter.most_common(1)[0][0] if counter else None


@dataclass
class StepTally:
    """The step in progress (batches, micro-steps, samples) and, over the timed steps, how they were spread."""

    samples_per_step: int | None = None
    """Given by the user: batches are then not inspected."""
    yields: int = 0
    explicit_micro: int = 0
    yield_samples: int = 0
    explicit_samples: int = 0
    samples_unknown: bool = False
    per_step_samples: Counter[int] = field(default_factory=Counter)
    per_step_micro: Counter[int] = field(default_factory=Counter)
    micro_batch: Counter[int] = field(default_factory=Counter)

    def batch(self, batch: Any) -> None:
        """A batch wrap() yielded."""
        self.yields += 1
        if self.samples_per_step is None:
            n = leading_dim(batch)
            if n is None:
                self.samples_unknown = True
            else:
                self.yield_samples += n
                self.micro_batch[n] += 1

    def micro_step(self, samples: int | None) -> None:
        self.explicit_micro += 1
        if samples is not None:
            self.explicit_samples += int(samples)

    @property
    def begun(self) -> bool:
        """The step in progress has seen a batch or a micro-step."""
        return bool(self.yields or self.explicit_micro)

    def end_step(self, samples: int | None) -> tuple[int | None, int]:
        """(samples, micro-steps) of the step that ends now; the next step starts from zero."""
        micro = self.explicit_micro or self.yields or 1
        if samples is not None:
            counted: int | None = int(samples)
        elif self.samples_per_step is not None:
            counted = self.samples_per_step
        elif self.explicit_samples:
            counted = self.explicit_samples
        elif self.yield_samples and not self.samples_unknown:
            counted = self.yield_samples
        else:
            counted = None
        self.yields = self.explicit_micro = self.yield_samples = self.explicit_samples = 0
        self.samples_unknown = False
        return counted, micro

    def timed(self, samples: int | None, micro: int) -> None:
        """A timed step's figures, for the typical step."""
        if samples is not None:
            self.per_step_samples[samples] += 1
        self.per_step_micro[micro] += 1


class Reservoir:
    """A uniform sample of at most ``capacity`` step records from a stream of unknown length (algorithm R).

    Seeded with our own generator (the user's random streams are untouched); `in_order()` restores the timeline.
    """

    def __init__(self, capacity: int, seed: int = 0) -> None:
        self.capacity = capacity
        self.seen = 0
        self.items: list[StepRecord] = []
        self._rng = random.Random(seed)

    def add(self, item: StepRecord) -> None:
        self.seen += 1
        if len(self.items) < self.capacity:
            self.items.append(item)
            return
        j = self._rng.randrange(self.seen)
        if j < self.capacity:
            self.items[j] = item

    def in_order(self) -> list[StepRecord]:
        return sorted(self.items, key=lambda s: s.index)
