"""The torch-using helpers knobs apply themselves with in the trial process (and the trial reuses).

    from perfscope.knobs.apply.checkpointing import apply_checkpointing   # inside a knob's hook, never at load
    from perfscope.knobs.apply.tensors import map_tensors

Why here and not in perfscope.trial: a knob applies itself (`Knob.apply_to_model`, `apply_to_batch`, ...), and the
trial asks the knobs; were these helpers in trial/, knobs and trial would import each other. These modules import
torch at load, so a knob module imports them inside its hooks only (tests/test_import_graph.py checks it): the
analyze process and the readers of results load the knobs without them. They import nothing of perfscope's.
"""
