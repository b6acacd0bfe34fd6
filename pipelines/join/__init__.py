"""join-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``strategy.py``: broadcast or hash shuffle, chosen by size.
- ``tasks.py``: what runs on the workers: keying, probing, counting, the aggregate.
- ``shared.py``: what the run and its check both use: the group count.
- ``check.py``: the verification (a join by dense lookup, no join) and its mutations.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Inner join of two synthetic tables (like dask-cuda's merge benchmark; the smaller "
           "broadcast where it fits, else hash-shuffled) and a group-by aggregate")
