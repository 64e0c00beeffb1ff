"""A small transformer language model for distributed analysis: every rank trains it under DDP (or what the
sweep tries instead: FSDP2, ZeRO-1, bucket sizes, no_sync accumulation, tensor and pipeline parallelism).

    perfscope analyze examples/ddp_tiny_transformer.py --nproc-per-node 2 --device cpu

Nothing in this file knows it runs distributed: perfscope starts the ranks with torchrun, wraps the model, and
gives each rank its own data (a DistributedSampler shard of a Dataset). It is examples/tiny_transformer.py's model
and data, with the attention written the way tensor parallelism needs it (as torchtitan's Llama is): separate q, k
and v projections (a packed qkv Linear cannot be split by columns), and the head count taken from the tensor
(`view(b, t, -1, head_dim)`), so a rank holding half the heads runs the same code. Same parameters and FLOPs.
"""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope
from tiny_transformer import D_MODEL, N_HEADS, N_LAYERS, SEQ, VOCAB, batches, loss
from tiny_transformer import workload as single_process_workload


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.head_dim = d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n_heads = N_HEADS
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


def workload() -> perfscope.Workload:
    w = single_process_workload()
    w.name = "ddp_tiny_transformer"
    w.model = TinyGPT
    w.data_parallel = "ddp"
    return w


__all__ = ["TinyGPT", "batches", "loss", "workload"]
