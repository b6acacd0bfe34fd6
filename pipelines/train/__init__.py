"""train-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``inputs.py``: rows read from a .npy or Zarr input.
- ``present.py``: the reported value.
- ``tasks.py``: what runs on the workers: the shards, the gradient pass, the training loop.
- ``shared.py``: what the run and its check both use: the data's scheme and constants.
- ``check.py``: the verification and its mutations.
- ``check_replay.py``: the check's own replay of the training steps.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Softmax regression trained data-parallel: per-shard gradients, tree-reduced, weights"
           " broadcast")
