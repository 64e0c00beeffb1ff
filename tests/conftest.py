"""Suite-wide settings: the matmul-ceiling cache lives in a temporary folder, never in the user's ~/.cache.

Set in os.environ so the processes the tests start (analyze's trials, the hooks' jobs) use the same folder.
"""

from __future__ import annotations

import os

import pytest

from perfscope.measure.ceiling_cache import DIR_ENV


@pytest.fixture(autouse=True, scope="session")
def _ceiling_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ[DIR_ENV] = str(tmp_path_factory.mktemp("perfscope-cache"))
