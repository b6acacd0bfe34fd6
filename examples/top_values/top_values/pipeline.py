"""top-values: the k largest values of each key, over a Parquet or CSV table or random rows."""

import numpy as np
import pandas as pd

import daskgpu


def top(frame, k):
    """Each key's k largest values in ``frame`` (pandas or cuDF), by key, largest first."""
    ranked = frame.sort_values(["key", "value"], ascending=[True, False])
    return ranked.groupby("key").head(k).reset_index(drop=True)


def reference(rows, k):
    """One key's k largest values by NumPy alone: the check's independent path."""
    return pd.DataFrame({"value": np.sort(rows["value"].to_numpy())[::-1][:k]})


@daskgpu.table_pipeline(
    "top-values", "The k largest values of each key",
    columns={"key": daskgpu.Column.integers(0, 1000), "value": daskgpu.Column.uniform()},
    params=[daskgpu.Param("k", daskgpu.positive_int, 3, "Values kept per key.")],
    check=daskgpu.checks.groups_recomputed(reference, by="key"),
    mutations=[daskgpu.every_tenth_group_changed("key")])
def top_values(frame, k):
    """Top k per key in every partition, then of those, until one table is left."""
    return frame.reduction(top, top, chunk_kwargs={"k": k}, aggregate_kwargs={"k": k},
                           combine=top, combine_kwargs={"k": k}, meta=frame._meta)
