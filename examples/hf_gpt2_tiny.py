"""Hugging Face's own `GPT2LMHeadModel`, small enough for a CPU: a model nobody here wrote, as a new user brings it.

    perfscope analyze examples/hf_gpt2_tiny.py --device cpu

4 layers, 4 heads, 256 wide, vocab 8192, context 128; random init from a `GPT2Config` (no hub download), synthetic
tokens, AdamW, fp32 — the loop as written before any tuning. Needs transformers (`pip install 'perfscope[hf]'`).
"""

import torch

import perfscope

VOCAB, SEQ, D_MODEL, N_HEADS, N_LAYERS, BATCH = 8192, 128, 256, 4, 4, 8


def model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=D_MODEL, n_layer=N_LAYERS, n_head=N_HEADS)
    return GPT2LMHeadModel(config)


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randint(0, VOCAB, (batch_size, SEQ), generator=g)


def loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(input_ids=batch, labels=batch).loss  # the model shifts the labels itself


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=model,
        batches=batches,
        loss=loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4),
        batch_size=BATCH,
        tokens_per_sample=SEQ,
    )
