"""GPT-2 small (124M: 12 layers, 12 heads, d=768, vocab 50257, seq 1024), written the way a newcomer does:
fp32, no autocast, no TF32, no compile, vocab not padded. For GPUs.

    perfscope analyze examples/gpt2_small.py --device cuda

Synthetic tokens (no download); the model follows nanoGPT's layout with plain SDPA attention.
"""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

VOCAB, SEQ, D_MODEL, N_HEADS, N_LAYERS = 50257, 1024, 768, 12, 12


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.fc, self.fc_proj = nn.Linear(D_MODEL, 4 * D_MODEL), nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, N_HEADS, d // N_HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2 does

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        tokens = torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=g)
        yield tokens[:, :-1], tokens[:, 1:]


def loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=GPT2,
        batches=batches,
        loss=loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1),
        batch_size=8,
        tokens_per_sample=SEQ,
    )
