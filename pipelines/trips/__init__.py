"""trips-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare, the reported value and registration.
- ``tasks.py``: what runs on the workers: each partition read and summed by the fused kernel, the
  tree of sums.
- ``shared.py``: what the run and its check both use: the columns, the synthetic trips.
- ``check.py``: the verification (pandas over every partition) and its mutations.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Taxi-trip ETL: one fused kernel pass per partition (haversine distance, filter, sums"
           " by hour and passengers) on cuDF or pandas columns")
