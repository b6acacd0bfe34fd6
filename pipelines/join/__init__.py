"""join-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``strategy.py``: broadcast or hash shuffle, chosen by size.
- ``tasks.py``: what runs on the workers: keying, probing, counting, the aggregate.
- ``shared.py``: what the run and its check both use: the group count, the cells, the check's
  context.
- ``check.py``: the verification (joins by lookup, no join), declared; ``check_full.py`` its
  full depth's lookup of every row, ``check_replay.py`` what it runs on the workers,
  ``check_mutations.py`` the wrong answers it must refuse.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Inner join of two synthetic tables (like dask-cuda's merge benchmark; the smaller "
           "broadcast where it fits, else hash-shuffled) and a group-by aggregate")
