"""Helpers the catalogues share (a module of its own: the package imports the catalogues before its own body)."""

from __future__ import annotations


def join_parts(parts: str | list[str]) -> str:
    """A list parameter's words, "; "-joined (a str: an older file's single reason)."""
    return parts if isinstance(parts, str) else "; ".join(parts)
