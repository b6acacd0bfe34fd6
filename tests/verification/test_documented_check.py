"""The check of your own that docs/writing-a-pipeline.md lists, run as a user would run it:
it verifies at both depths, catches its mutation, and fails a run whose one row block is wrong.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import dask
import numpy as np
import pytest
from conftest import ROOT, compute_as_runner, verify_on

import daskgpu
from daskgpu.testing import check_pipeline

PAGE = ROOT / "docs" / "writing-a-pipeline.md"
CASE = {"rows": 3000, "columns": 80, "block_rows": 100, "seed": 3}


@pytest.fixture(scope="module")
def row_norms(tmp_path_factory):
    """The page's listing (the Python block that starts with the row-norms docstring)."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    (code,) = [b for b in blocks if b.startswith('"""row-norms:')]
    assert len(code.splitlines()) <= 100  # what the page promises
    path = tmp_path_factory.mktemp("listing") / "row_norms_listing.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("row_norms_listing", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_the_listing_verifies_at_both_depths_and_catches_its_mutation(row_norms,
                                                                     in_process_client):
    report = check_pipeline("row-norms", session=in_process_client, **CASE)
    assert report.depths == ("fast", "full") and len(report.caught) == 2, str(report)
    assert "of 30 row blocks checked again: a fault in at least 10 % of the row blocks is " \
           "caught with probability at least 99.9 %" in report.verified["fast"]
    assert "all 30 row blocks checked again" in report.verified["full"]


@pytest.mark.parametrize("where", ["random", "last"])
def test_a_wrong_row_block_fails_both_depths(row_norms, in_process_client, monkeypatch, where):
    """The run's matrix is wrong in one row block (a tenth of 10): both depths name its rows."""
    case = {**CASE, "block_rows": 300}
    wrong = 9 if where == "last" else int(np.random.default_rng(5).integers(1, 9))
    drawn = daskgpu.random_array

    def altered(shape, chunks, dtype, seed, backend):
        x = drawn(shape, chunks, dtype, seed, backend)
        rows = slice(wrong * 300, (wrong + 1) * 300)
        return dask.array.concatenate([x[:rows.start], x[rows] * 1.0001, x[rows.stop:]])

    monkeypatch.setattr(daskgpu, "random_array", altered)
    spec, workload, raw = compute_as_runner(in_process_client, "row-norms", **case)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and check.detail.startswith(f"row {wrong * 300}: "), check.detail
