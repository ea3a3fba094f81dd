"""Analysis of a run directory: tables (load), metrics, the report, the summary and comparisons."""

from analysis.load import Run, RunError, load

__all__ = ["Run", "RunError", "load"]
