"""train-pipeline: its code, one file a job.

- ``pipeline.py``: parameters, settle, baseline, prepare and registration.
- ``inputs.py``: rows read from a .npy or Zarr input.
- ``present.py``: the reported value.
- ``tasks.py``: what runs on the workers: the shards, the gradient pass, the training loop.
- ``hidden.py``: the hidden-layer model (``--hidden``) on the workers: initial weights, a pass.
- ``shared.py``: what the run and its check both use: the data's scheme and constants.
- ``check.py``: the check's declaration and the steps both depths share; ``check_fast.py``,
  ``check_full.py``: each depth's own; ``check_replay.py``: its worker side, the model
  evaluated its own way; ``check_mutations.py``: the wrong results it must reject.

Importing this package imports nothing: a worker that unpickles one of its tasks imports it
first.
"""

# The one-line summary: `list` and `--help` read it without importing the pipeline.
SUMMARY = ("Softmax regression, or one ReLU hidden layer before it, trained data-parallel: "
           "per-shard gradients, tree-reduced, weights broadcast")
