"""Small formatting helpers shared by the rules' evidence lines."""

from __future__ import annotations


def pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"
