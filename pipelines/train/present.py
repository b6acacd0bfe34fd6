"""What a train-pipeline run reports: its value, and loss and accuracy per step in its data."""

from __future__ import annotations

import numpy as np

from daskgpu.toolkit.registry import Workload


def present(workload: Workload, raw: dict) -> dict:
    """The run's value (its losses); accuracies and step times go to the report's data.

    Accuracies count rows, and a row within rounding of a tie between two classes may go
    either way in another correct computation (the bench's baseline): they are checked by
    ``verify``, which allows for such rows, not compared as the value. A mini-batch step's
    accuracy is that of its batch. The shards stay on the workers for ``verify`` (the fast
    check reads them), which lets them go.
    """
    ctx = workload.context
    ctx.kept.presented = True
    ctx.kept.final_weights = np.asarray(raw["weights"][-1])  # what --output writes
    samples, tested = ctx.samples, sum(ctx.test_sizes)
    accuracies = np.asarray(raw["right"]) / np.maximum(np.asarray(raw["rows"]), 1)
    test = int(raw["test_right"]) / tested if tested else None
    wall = float(np.median(raw["step_s"]))
    computing = float(np.median(raw["step_compute_s"]))
    communicating = max(0.0, wall - computing)
    workload.description.update({
        "loss per step": sparkline(raw["losses"]),
        "accuracy per step": sparkline(accuracies),
        "step time": f"{wall:.4g} s median of {len(raw['step_s'])}: {computing:.4g} s "
                     f"computing, {communicating:.4g} s communicating",
        "samples/s": round(int(raw["rows"][0]) / wall),
        "train_accuracy": float(accuracies[-1]),
        "test_accuracy": test,
        "train vs held out": (f"loss {float(raw['losses'][-1]):.4g} / "
                              f"{float(raw['test_loss']) / tested:.4g}, accuracy "
                              f"{float(accuracies[-1]):.4f} / {test:.4f} ({samples} training "
                              f"rows, {tested} held out)" if tested else
                              f"loss {float(raw['losses'][-1]):.4g}, accuracy "
                              f"{float(accuracies[-1]):.4f} ({samples} training rows, none "
                              "held out)"),
        "accuracies": accuracies,  # an array: the table shows it whole, JSON as a list
        "step_s": wall,
        "step_compute_s": computing,
        "step_communication_s": communicating,
    })
    if ctx.teacher and tested:  # only a teacher knows the best accuracy
        workload.description["best_accuracy"] = float(raw["test_best"]) / tested
    return value_of(raw, samples, tested)


def value_of(raw: dict, samples: int, tested: int) -> dict:
    """The run's value: the final loss, the test loss (None: none held out), every step's."""
    losses = [float(v) for v in raw["losses"]]
    return {"loss": losses[-1],
            "test_loss": float(raw["test_loss"]) / tested if tested else None,
            "losses": losses}


def sparkline(values) -> str:
    """A one-line picture of ``values``, with the first and last.

    >>> sparkline([2.0, 1.0, 0.5])
    '█▃▁ 2 to 0.5'
    """
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    line = "".join(bars[round((v - low) / span * (len(bars) - 1))] for v in values)
    return f"{line} {values[0]:.4g} to {values[-1]:.4g}"
