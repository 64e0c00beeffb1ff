"""A small transformer language model for distributed analysis: every rank trains it under DDP (or what the
sweep tries instead: FSDP2, ZeRO-1, bucket sizes, no_sync accumulation).

    perfscope analyze examples/ddp_tiny_transformer.py --nproc-per-node 2 --device cpu

Nothing in this file knows it runs distributed: perfscope starts the ranks with torchrun, wraps the model, and
gives each rank its own data (a DistributedSampler shard of a Dataset). It is examples/tiny_transformer.py's model and data.
"""

import perfscope
from tiny_transformer import workload as single_process_workload


def workload() -> perfscope.Workload:
    w = single_process_workload()
    w.name = "ddp_tiny_transformer"
    w.data_parallel = "ddp"
    return w
