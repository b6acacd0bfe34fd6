"""histogram-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``tasks.py``: what runs on the workers: the data, the kernel per block, the default range.
- ``shared.py``: what the run and its check both use: the layout of the raw result, the checked
  cells, and the check's typed context (``HistogramContext``).
- ``check.py``: the verification declared on ``daskgpu.verification`` (the steps both depths
  share); ``check_fast.py``, ``check_full.py``: the steps of one depth; ``check_replay.py``: the
  recomputations they call; ``check_mutations.py``: the wrong results both depths must catch.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = "Histogram of a large array (numpy.histogram semantics) with a custom kernel per chunk"
