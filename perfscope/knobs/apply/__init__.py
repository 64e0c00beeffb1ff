"""The torch-using helpers knobs apply themselves with in the trial process (and the trial reuses): here, not in
perfscope.trial, which imports the knobs. They import torch at load, so a knob imports them inside its hooks only
(tests/test_import_graph.py); they import nothing of perfscope's. Design notes: docs/sweep.md, "Adding a knob"."""
