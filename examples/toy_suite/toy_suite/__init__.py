"""The toy suite's own code, importable as ``toy_suite`` (see evals.py)."""
