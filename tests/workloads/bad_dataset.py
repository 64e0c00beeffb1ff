import torch
from torch import nn

import perfscope


class Flaky(torch.utils.data.Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i == 3:
            raise KeyError(f"sample {i} is corrupt")  # line 13
        return torch.randn(4), torch.tensor(0)


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Linear(4, 2),
        dataset=Flaky,
        loss=lambda model, batch: torch.nn.functional.cross_entropy(model(batch[0]), batch[1]),
        batch_size=8,
    )
