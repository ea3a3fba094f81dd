"""Analysis of a run directory: tables (load), metrics, the report, the summary and comparisons.

`analysis.load(run_dir)` is the entry point for notebooks. It is resolved on first use so that
`lab` (which registers the analysis commands) starts without importing pandas and matplotlib.
"""

from typing import Any

__all__ = ["Run", "RunError", "load"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from analysis import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
