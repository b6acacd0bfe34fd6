"""train-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``inputs.py``: rows read from a .npy or Zarr input.
- ``present.py``: the reported value.
- ``tasks.py``: what runs on the workers: the shards, the gradient pass, the training loop.
- ``hidden.py``: the hidden-layer model (``--hidden``) on the workers: initial weights, a pass.
- ``shared.py``: what the run and its check both use: the data's scheme and constants.
- ``check.py``: the verification and its mutations.
- ``check_replay.py``: the check's own replay of the training steps.
- ``check_hidden.py``: the check's own float64 evaluation of the hidden-layer model.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Softmax regression, or one ReLU hidden layer before it, trained data-parallel: "
           "per-shard gradients, tree-reduced, weights broadcast")
