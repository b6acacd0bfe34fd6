"""``new-pipeline NAME``: a plugin package to start from, which installs, runs and tests as written.

The package holds a ``pyproject.toml`` declaring the ``daskgpu.pipelines`` entry point, the
pipeline module and a test that calls :func:`daskgpu.testing.check_pipeline`. It is one of the
packages under ``examples/`` under the user's name: ``threshold_count``, a
:func:`daskgpu.array_pipeline` with a ``numba.njit`` kernel, or (``--table``) ``top_values``, a
:func:`daskgpu.table_pipeline` keeping each key's largest values. Given an example's own name,
it writes that example byte for byte (daskgpu's tests hold it to that, and install and run the
examples). Nothing is written unless all of it can be.
"""

from __future__ import annotations

import os
import re

from daskgpu.errors import ParameterError

NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

PYPROJECT = """[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
description = "{name}: a daskgpu plugin pipeline"
requires-python = ">=3.11"
dependencies = ["daskgpu", {dependencies}]

[project.entry-points."daskgpu.pipelines"]
{package} = "{package}.pipeline"

[tool.setuptools]
packages = ["{package}"]
"""

INIT = '"""A daskgpu plugin: {name}, written with ``daskgpu.{kind}_pipeline``."""\n'

PIPELINE = '''\
"""{name}: how many values of each row lie above a threshold, by a numba.njit kernel."""

import numba
import numpy as np

import daskgpu


@numba.njit
def above(block, threshold):
    """Per-row counts of one block's values above ``threshold`` (NumPy blocks: CPU workers)."""
    out = np.zeros(block.shape[0], np.int64)
    for i in range(block.shape[0]):
        for j in range(block.shape[1]):
            out[i] += block[i, j] > threshold
    return out


@daskgpu.array_pipeline(
    "{name}", "Values above a threshold, per row",
    params=[daskgpu.Param("threshold", daskgpu.finite_float, 0.5, "Count values above this.")],
    check=[daskgpu.checks.rows_recomputed(lambda rows, threshold: (rows > threshold).sum(1)),
           daskgpu.checks.count_bound(lambda threshold: min(1.0, max(0.0, 1.0 - threshold)))])
def {function}(data, threshold):
    """Every row block through the kernel (its column blocks joined): one count per row."""
    return data.map_blocks(above, threshold, drop_axis=1, dtype=np.int64, meta=np.empty(0, int))
'''

TABLE_PIPELINE = '''\
"""{name}: the k largest values of each key, over a Parquet or CSV table or random rows."""

import numpy as np
import pandas as pd

import daskgpu


def top(frame, k):
    """Each key's k largest values in ``frame`` (pandas or cuDF), by key, largest first."""
    ranked = frame.sort_values(["key", "value"], ascending=[True, False])
    return ranked.groupby("key").head(k).reset_index(drop=True)


def reference(rows, k):
    """One key's k largest values by NumPy alone: the check's independent path."""
    return pd.DataFrame({{"value": np.sort(rows["value"].to_numpy())[::-1][:k]}})


@daskgpu.table_pipeline(
    "{name}", "The k largest values of each key",
    columns={{"key": daskgpu.Column.integers(0, 1000), "value": daskgpu.Column.uniform()}},
    params=[daskgpu.Param("k", daskgpu.positive_int, 3, "Values kept per key.")],
    check=daskgpu.checks.groups_recomputed(reference, by="key"),
    mutations=[daskgpu.every_tenth_group_changed("key")])
def {function}(frame, k):
    """Top k per key in every partition, then of those, until one table is left."""
    return frame.reduction(top, top, chunk_kwargs={{"k": k}}, aggregate_kwargs={{"k": k}},
                           combine=top, combine_kwargs={{"k": k}}, meta=frame._meta)
'''

TEST_HEAD = '''\
"""{name} checks its own answer: it verifies and catches its mutations at both depths.

Run it from this directory after ``pip install -e .`` (the workers import the plugin as any
installed package): ``pytest tests``.
"""
'''

TEST = TEST_HEAD + '''
import {package}.pipeline  # noqa: F401  (registers "{name}")

from daskgpu.testing import check_pipeline


def test_{function}_checks_its_answer():
    """The unaltered result verifies at fast and full; every tenth row changed is caught."""
    report = check_pipeline("{name}", shape="600,400", chunks="100,200", seed=3)
    assert report.depths == ("fast", "full")
    assert report.params["threshold"] == 0.5
    assert {{c.mutation for c in report.caught}} == {{"every tenth row changed"}}
'''

TABLE_TEST = TEST_HEAD + '''
import pandas as pd
import {package}.pipeline  # noqa: F401  (registers "{name}")

from daskgpu.testing import check_pipeline


def test_{function}_checks_its_answer():
    """The unaltered result verifies at fast and full; every tenth key changed is caught."""
    report = check_pipeline("{name}", rows=20_000, partitions=4, seed=3)
    assert report.depths == ("fast", "full")
    assert {{c.mutation for c in report.caught}} == {{"every tenth group changed"}}


def test_{function}_reads_a_parquet_table(tmp_path):
    """The same pipeline over a Parquet input verifies, and its answer is the pandas one."""
    table = pd.DataFrame({{"key": [1, 2, 1, 1, 2, 3], "value": [0.5, 0.1, 0.9, 0.7, 0.3, 0.2]}})
    table.to_parquet(tmp_path / "t.parquet")
    report = check_pipeline("{name}", input=str(tmp_path / "t.parquet"), k=2)
    assert report.value == [{{"key": 1, "value": 0.9}}, {{"key": 1, "value": 0.7}},
                            {{"key": 2, "value": 0.3}}, {{"key": 2, "value": 0.1}},
                            {{"key": 3, "value": 0.2}}]
'''


def files(name: str, table: bool = False) -> dict[str, str]:
    """``{relative path: text}`` of the package for pipeline ``name``.

    An array pipeline (a ``numba.njit`` kernel per row block), or with ``table`` a table
    pipeline (each key's largest values, over random rows or a Parquet or CSV input).

    Raises
    ------
    ParameterError
        A name that is not lowercase words joined by hyphens.
    """
    if not NAME.fullmatch(name):
        raise ParameterError(f"new-pipeline {name}: give lowercase letters and digits in words "
                             "joined by hyphens, starting with a letter (e.g. my-count)")
    package = name.replace("-", "_")
    fields = {"name": name, "package": package, "function": package,
              "kind": "table" if table else "array",
              "dependencies": '"pandas>=2.0"' if table else '"numba>=0.60", "numpy>=1.26"'}
    return {
        "pyproject.toml": PYPROJECT.format(**fields),
        f"{package}/__init__.py": INIT.format(**fields),
        f"{package}/pipeline.py": (TABLE_PIPELINE if table else PIPELINE).format(**fields),
        f"tests/test_{package}.py": (TABLE_TEST if table else TEST).format(**fields),
    }


def write(name: str, folder: str, table: bool = False) -> list[str]:
    """Write the package for pipeline ``name`` into the new directory ``folder``.

    ``table``: a table pipeline (see :func:`files`).

    Returns
    -------
    list of str
        The paths written.

    Raises
    ------
    ParameterError
        A bad name, or a ``folder`` that exists already (nothing is written then).
    """
    contents = files(name, table)
    if os.path.lexists(folder):
        raise ParameterError(f"new-pipeline {name}: {folder} exists; choose another --dir or "
                             "remove it")
    written = []
    for relative, text in contents.items():
        path = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
        written.append(path)
    return written
