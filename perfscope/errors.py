"""Errors a user can act on, and the exit codes every command shares. Design notes: docs/internals.md."""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
"""A perfscope bug, or every trial of an analysis failed."""
EXIT_REGRESSION = 1
"""`check`: a metric dropped beyond --max-drop (shares 1 with EXIT_INTERNAL; stderr tells which)."""
EXIT_USER = 2
"""Bad input: a file, an argument, mismatched runs."""
EXIT_INCONCLUSIVE = 3
"""`check`: the runs cannot tell a regression from noise; never a silent pass."""
EXIT_NOT_COMPARABLE = 4
"""`check`: the current runs ran on another kind of machine or software than the baseline's, which its history
cannot judge (cores, CPU model, GPU, torch ...): neither a pass nor an input error."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: what finished is saved."""


class UserError(Exception):
    """A problem in the user's input (exit code 2), as opposed to a perfscope bug (exit code 1)."""


class WorkloadError(UserError):
    """The workload file breaks the contract. The message names the file and line where known."""


class ResultsError(UserError, ValueError):
    """A results or baseline file that cannot be used: missing, corrupt, hostile, or another schema version."""
