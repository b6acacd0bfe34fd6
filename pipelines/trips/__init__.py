"""trips-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``tasks.py``: what runs on the workers: each partition read and summed by the fused kernel, the
  tree of sums.
- ``shared.py``: what the run and its check both use: the columns, the synthetic trips, the
  cells, the check's context.
- ``check.py``: the check, declared (``CHECK``), and the steps both depths share;
  ``check_fast.py`` and ``check_full.py`` each depth's own; ``check_replay.py`` the trips read
  again and grouped; ``check_mutations.py`` the wrong results it must catch.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Taxi-trip ETL: one fused kernel pass per partition (haversine distance, filter, sums"
           " by hour and passengers) on cuDF or pandas columns")
