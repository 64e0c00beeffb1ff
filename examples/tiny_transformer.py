"""A tiny GPT-style transformer on synthetic tokens: analyzes on a 2-core CPU in well under a minute.

    perfscope analyze examples/tiny_transformer.py --device cpu
"""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

VOCAB, SEQ, D_MODEL, N_HEADS, N_LAYERS = 512, 64, 128, 4, 2


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.ModuleList(Block(D_MODEL, N_HEADS) for _ in range(N_LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        tokens = torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=g)
        yield tokens[:, :-1], tokens[:, 1:]


def loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=TinyGPT,
        batches=batches,
        loss=loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4),
        batch_size=8,
        tokens_per_sample=SEQ,
    )
