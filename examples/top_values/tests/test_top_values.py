"""top-values checks its own answer: it verifies and catches its mutations at both depths.

Run it from this directory after ``pip install -e .`` (the workers import the plugin as any
installed package): ``pytest tests``.
"""

import pandas as pd
import top_values.pipeline  # noqa: F401  (registers "top-values")

from daskgpu.testing import check_pipeline


def test_top_values_checks_its_answer():
    """The unaltered result verifies at fast and full; every tenth key changed is caught."""
    report = check_pipeline("top-values", rows=20_000, partitions=4, seed=3)
    assert report.depths == ("fast", "full")
    assert {c.mutation for c in report.caught} == {"every tenth group changed"}


def test_top_values_reads_a_parquet_table(tmp_path):
    """The same pipeline over a Parquet input verifies, and its answer is the pandas one."""
    table = pd.DataFrame({"key": [1, 2, 1, 1, 2, 3], "value": [0.5, 0.1, 0.9, 0.7, 0.3, 0.2]})
    table.to_parquet(tmp_path / "t.parquet")
    report = check_pipeline("top-values", input=str(tmp_path / "t.parquet"), k=2)
    assert report.value == [{"key": 1, "value": 0.9}, {"key": 1, "value": 0.7},
                            {"key": 2, "value": 0.3}, {"key": 2, "value": 0.1},
                            {"key": 3, "value": 0.2}]
