"""train-pipeline's fast check: on the rows the run kept on its workers, a tenth of the work.

Every pass of the run reports each cell's sums (:func:`pipelines.train.shared.cell_rows`): the
loss, the right answers and, in a step, the cell's gradient along seeded random probes; the
cells of this check's seeded sample report their gradient whole. Besides what
:mod:`pipelines.train.check` establishes of them, the fast depth works where the shards live,
with its own code (:mod:`pipelines.train.check_replay`): one pass over every kept row, in the
data's dtype, gives the final weights' cells; the sampled cells are recomputed in float64 and
their gradients compared entry by entry (a fault the run's own probes agree with shows there);
the test pass cell by cell; and the kept rows are the data (a generated shard's first cell
drawn again with NumPy's generator, or a seeded sample of an input's cells read again).
"""
from __future__ import annotations

import dask
import numpy as np

from daskgpu.verification import Cells, Plan, Sampler, differences
from pipelines.train.check_replay import (
    Again,
    Job,
    batch_of,
    cells_differ,
    entry,
    held_out,
    input_words,
    kept_test,
    kept_training,
    model_of,
    rows_again,
    step_geometry,
    step_rows,
    test_rows,
    training_rows,
)
from pipelines.train.shared import TEST, TRAIN, TrainContext


def cell_plan(ctx: TrainContext, depth: str = "fast") -> Plan:
    """The steps' cell passes recomputed in float64."""
    return Plan.at(depth, int(step_geometry(ctx)[2].sum()), Sampler(ctx.seed, "cells"),
                   unit="step cells")


def data_plan(ctx: TrainContext) -> Plan:
    """An input's cells read again (training cells, then test cells)."""
    return Plan.at("fast", ctx.cells("final").total + ctx.cells("test").total,
                   Sampler(ctx.seed, "data"), unit="cells")


def _file_rows(ctx: TrainContext) -> tuple[list, list]:
    """An input's file rows of each training shard, and of each one's held-out rows."""
    test = held_out(ctx.seed, ctx.source.rows, ctx.held_out)
    firsts = np.cumsum((0, *ctx.train_sizes))
    firsts = [int(f) for f in firsts[:-1]]
    return ([training_rows(f, n, test) for f, n in zip(firsts, ctx.train_sizes, strict=True)],
            test_rows(test, firsts, ctx.source.rows))


def _reread(ctx: TrainContext) -> tuple[list, list]:
    """Per training and test shard, ``(first kept row, file rows)`` of its cells read again."""
    train, test = ctx.cells("final"), ctx.cells("test")
    out = ([[] for _ in train.per_part], [[] for _ in test.per_part])
    if ctx.teacher:
        return out
    files = _file_rows(ctx)
    for g in data_plan(ctx):
        kind, cells = (0, train) if g < train.total else (1, test)
        s, c = cells.locate(g if kind == 0 else g - train.total)
        cut = slice(c * ctx.cell, (c + 1) * ctx.cell)
        out[kind][s].append((cut.start, files[kind][s][cut]))
    return out


def reported_cells(ctx: TrainContext) -> list[np.ndarray]:
    """Per step, the ``(shard, cell)`` rows of the sample, whose gradient the run reports."""
    counts, chosen = step_geometry(ctx)[2], [[] for _ in range(ctx.steps)]
    steps = Cells(tuple(counts.sum(axis=1)))  # the steps' cells, step after step
    for g in cell_plan(ctx):
        t, rest = steps.locate(g)
        chosen[t].append(Cells(tuple(counts[t])).locate(rest))
    return [np.array(rows, dtype=np.int64).reshape(-1, 2) for rows in chosen]


def training_jobs(ctx: TrainContext, r) -> list[Job]:
    """What each kept training shard recomputes (its sampled cells' weights once per step)."""
    sampled = [[] for _ in ctx.train_sizes]
    for t, rows in enumerate(reported_cells(ctx)):
        for s, c in rows:  # the step's mini-batch rows of the shard, drawn again
            sampled[s].append((t, int(c), None if ctx.batch is None else step_rows(
                ctx.seed, t, batch_of(ctx, s), ctx.train_sizes[s])[0]))
    reread, w = _reread(ctx)[0], r.weights
    return [Job(model_of(ctx), ctx.library, ctx.seed, w[-1], tuple(sampled[s]),
                {t: w[t] for t, _, _ in sampled[s]}, (TRAIN, s) if ctx.teacher else None,
                reread=tuple(reread[s])) for s in range(len(ctx.train_sizes))]


def recompute(ctx: TrainContext, r, verdict) -> None:
    """The kept shards' tasks, computed where the run kept them."""
    futures, count = ctx.shards.futures, len(ctx.train_sizes)
    if not verdict.require(bool(futures), "the run's shards were let go before the fast check "
                                          "read them"):
        return
    reread = _reread(ctx)[1]
    tests = [Job(model_of(ctx), ctx.library, ctx.seed, r.weights[-1],
                 redraw=(TEST, s) if ctx.teacher else None, reread=tuple(reread[s]))
             for s in range(len(ctx.test_sizes))]
    jobs = [*zip(futures[:count], training_jobs(ctx, r), strict=True),
            *zip(futures[count:], tests, strict=True)]
    done = dask.compute(*(dask.delayed(kept_training if i < count else kept_test, pure=False)(
        f, job, [rows_again(ctx.source, rows, ctx.dtype) for _, rows in job.reread])
        for i, (f, job) in enumerate(jobs)))
    shards, tests = list(done[:count]), list(done[count:])
    r.again = Again(
        passes={ctx.steps: sum(part["cells"].sum(axis=0) for part in shards)}, gradients={},
        test=sum((part["cells"].sum(axis=0) for part in tests), np.zeros(4)),
        best=sum((part["best"] for part in tests), np.zeros(3)),
        labels=sum((part["labels"] for part in tests), np.zeros(ctx.classes)),
        sums=sum(part["sums"] for part in shards), shards=shards, tests=tests)


def kept_are_the_data(ctx: TrainContext, r, verdict) -> None:
    """The kept rows against the data's source."""
    source = "its seed" if ctx.teacher else input_words(ctx.source)
    compared = 0
    for what, parts in (("shard", r.again.shards), ("test shard", r.again.tests)):
        for s, part in enumerate(parts):
            rows, differ = part["data"]
            compared += rows
            if not verdict.require(differ < 0, f"{what} {s}: kept row {differ} differs from "
                                               f"{source} (the data the run trained on are "
                                               "not the data)"):
                return
    verdict.establish(
        f"{data_plan(ctx).promise} read again from {source} ({compared} rows) and "
        "equal to the rows kept" if not ctx.teacher else
        f"the first {compared} kept rows of the shards drawn again from their seeds and equal"
        if compared else "the kept rows taken as drawn (their generator is not drawn again)")


def cells_agree(ctx: TrainContext, r, verdict) -> None:
    """Every cell of the final pass and of the test pass."""
    for passed, sums, parts, what in (("final", r.cells[-1], r.again.shards,
                                       f"step {ctx.steps}"),
                                      ("test", r.test_cells, r.again.tests, "test pass")):
        got, cells = np.concatenate([part["cells"] for part in parts] or [np.zeros((0, 4))]), \
            ctx.cells(passed)
        if not verdict.note(cells_differ(sums, got, lambda i, c=cells, w=what: (
                "{}, shard {} cell {}".format(w, *c.locate(i))))):
            return
    verdict.establish(f"the final weights recomputed on all {ctx.samples} rows kept on the "
                      "workers agree, cell by cell")


def sampled_cells_agree(ctx: TrainContext, r, verdict) -> None:
    """The seeded sample of the steps' cells, recomputed in float64.

    Their losses, right answers, probes, and the gradients the run reported for them, entry by
    entry: a fault that the run's own probes agree with shows there.
    """
    asked = reported_cells(ctx)
    for t, rows in enumerate(asked):
        got = np.asarray(r.cells[t].get("reported", ()))
        if not verdict.require(np.array_equal(got, rows[:, 1]), f"step {t + 1}: gradients "
                               f"reported for cells {got.tolist()}, {rows[:, 1].tolist()} "
                               "asked"):
            return
    counts = step_geometry(ctx)[2]
    for s, part in enumerate(r.again.shards):
        for t, c, got, along, tol, gradient, allowed in part["sampled"]:
            g, sums, where = (int(counts[t, :s].sum()) + c, r.cells[t],
                              f"step {t + 1}, shard {s} cell {c}")
            whole = sums["gradient"][np.flatnonzero((asked[t] == (s, c)).all(axis=1))[0]]
            if not verdict.note(cells_differ(
                    {k: sums[k][g:g + 1] for k in ("loss", "right")}, got[None],
                    lambda _, w=where: w, " in float64") or differences(
                    whole, gradient, tolerance=allowed, what="entry", unit="entries",
                    label=lambda i, w=where: f"{w}: gradient[{entry(i, r.weights.shape[1:])}]",
                    reported_as="{} reported", expected_as="{} recomputed in float64")
                    or differences(sums["probe"][g], along, tolerance=tol, what="probe",
                                   label=lambda m, w=where: f"{w}: probe {m}",
                                   reported_as="{} in the run",
                                   expected_as="{} recomputed in float64")):
                return
    verdict.establish(f"{cell_plan(ctx).promise}, in float64: losses, right answers, probes "
                      "and reported gradients agree")
