"""The results model: what one perfscope run measured, as typed dataclasses and a versioned JSON file.

    >>> from perfscope.results import Results
    >>> results = Results.load("perfscope-out/results.json")
    >>> [t.metrics.samples_per_s for t in results.ok_trials()]

Design notes: docs/results.md.
"""

from perfscope.errors import ResultsError
from perfscope.results.dataset_profile import DatasetProfile, ProfiledFunction
from perfscope.results.distributed import *  # noqa: F403 - the distributed facts are part of the model
from perfscope.results.distributed import __all__ as _distributed_all
from perfscope.results.io import read_json, write_json, write_text
from perfscope.results.layout import *  # noqa: F403 - model-parallel facts and the layout table
from perfscope.results.layout import __all__ as _layout_all
from perfscope.results.messages import Message, msg
from perfscope.results.model import *  # noqa: F403 - the model is this package's API
from perfscope.results.model import __all__ as _model_all
from perfscope.results.serde import from_jsonable, to_jsonable
from perfscope.results.trace_facts import *  # noqa: F403 - typed trace facts are part of the model
from perfscope.results.trace_facts import __all__ as _trace_facts_all

__all__ = [*_model_all, *_trace_facts_all, *_distributed_all, *_layout_all, "DatasetProfile", "Message", "ProfiledFunction", "ResultsError", "from_jsonable", "msg", "read_json", "to_jsonable", "write_json", "write_text"]
