"""Parallel sweeps: lanes (a device and a disjoint set of cores each) run the sweep's pairs at the same time.

    perfscope analyze train.py --lanes 2                        # this machine: 2 lanes, half the cores each
    perfscope analyze train.py --devices 0,1,2,3                # one lane per GPU
    perfscope analyze train.py --lanes 8 --executor slurm --slurm-partition gpu --slurm-gpus-per-node 1

plan.py splits the machine into lanes; executors.py runs a lane's trials (local subprocesses; ray.py and slurm.py
hand them to engines users already run); aa.py checks the lanes against each other before the sweep; sweep.py is
the sweep that measures several candidates at once, one pair per lane. Every comparison stays within one lane
(perfscope.search.compare pairs a run with its own lane's baseline runs), and the decisions stay in perfscope's
sweep, so every executor gives the same statistics. docs/parallel.md says what can go wrong and what controls it.
"""
