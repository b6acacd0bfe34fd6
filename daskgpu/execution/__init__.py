"""Running a pipeline on a session.

The runner (build, compute, verify), waiting through worker faults, task errors in one line,
progress, peak memory, benchmarks against baselines, and the report of a run.
"""
