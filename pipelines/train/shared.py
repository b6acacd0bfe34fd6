"""What train-pipeline and its check (:mod:`pipelines.train.check`) both use.

The documented data scheme, as constants: a teacher (softmax regression with random weights)
labels standard normal features, a Gumbel draw per class making its labels noisy, so that
the best accuracy any model can reach is known. Per-block seeds follow daskgpu's scheme,
``SeedSequence(seed, spawn_key=(part, shard))``: ``part`` is :data:`TRAIN` or :data:`TEST`;
the teacher's weights come from ``spawn_key=(TEACHER,)``. And the shard geometry, and
:class:`TrainContext`, what the check knows of a run. Nothing here draws, trains or checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskgpu.verification import Cells

#: ``spawn_key`` parts of the per-shard seeds: training rows, held-out test rows, the teacher.
TRAIN, TEST, TEACHER = 0, 1, 2
#: Standard deviation of the teacher's logits (weights ``N(0, (SHARPNESS / sqrt(d + 1))^2)``,
#: bias included as a last row); with 10 classes its best accuracy is about 0.8.
TEACHER_SHARPNESS = 4.0
#: Held-out test rows: this share of the training rows, within [TEST_MIN, TEST_MAX].
TEST_SHARE = 0.1
TEST_MIN = 1_000
TEST_MAX = 200_000


def held_out_rows(samples: int, fraction: float | None = None) -> int:
    """Held-out test rows for ``samples`` training rows (generated data).

    A tenth within ``[TEST_MIN, TEST_MAX]``; with ``fraction`` (``--validation-fraction``)
    that share of ``samples`` rounded up, at least one; none with a ``fraction`` of 0.

    >>> held_out_rows(20_000), held_out_rows(10**9), held_out_rows(20_000, 0.25)
    (2000, 200000, 5000)
    """
    if fraction == 0:
        return 0
    if fraction is not None:
        return max(1, math.ceil(fraction * samples))
    return min(TEST_MAX, max(TEST_MIN, math.ceil(TEST_SHARE * samples)))


def held_out_shards(rows: int, shards: int) -> tuple[int, ...]:
    """Test rows split into at most ``shards`` near-equal shards (none without test rows).

    >>> held_out_shards(10, 3), held_out_shards(0, 3)
    ((4, 3, 3), ())
    """
    if rows == 0:
        return ()
    shards = max(1, min(shards, rows))
    base, extra = divmod(rows, shards)
    return tuple(base + (i < extra) for i in range(shards))


#: ``spawn_key`` parts of the mini-batch draws (``(BATCH, step, shard)``) and of the held-out
#: rows of an input (``(HELD_OUT,)``).
BATCH, HELD_OUT = 3, 4


def input_held_out(rows: int, fraction: float | None = None) -> int:
    """Held-out test rows of an input of ``rows`` rows (at least 2): a tenth, at least 1.

    With ``fraction`` (``--validation-fraction``): that share of the rows rounded half up,
    at least 1 and at most ``rows - 1``, with no upper cap; none with a ``fraction`` of 0.

    >>> input_held_out(2), input_held_out(3000), input_held_out(1797, 0.2), input_held_out(9, 0)
    (1, 300, 359, 0)
    """
    if fraction == 0:
        return 0
    if fraction is not None:
        return min(rows - 1, max(1, math.floor(fraction * rows + 0.5)))
    return min(TEST_MAX, rows - 1, max(1, math.ceil(TEST_SHARE * rows)))


def batch_rows(batch: int, rows: int, samples: int) -> int:
    """Rows a shard of ``rows`` draws for a mini-batch of ``batch`` of ``samples`` rows.

    Its share of the batch, rounded half up, at least one and at most all its rows.

    >>> batch_rows(100, 700, 3000), batch_rows(100, 10, 3000), batch_rows(10**6, 5, 6)
    (23, 1, 5)
    """
    return min(rows, max(1, math.floor(batch * rows / samples + 0.5)))


#: ``spawn_key`` part of the seeded initial weights of a hidden-layer model, ``(INIT,)``:
#: ``default_rng`` of that sequence draws ``uniform(-a1, a1, (features, hidden))`` then
#: ``uniform(-a2, a2, (hidden, classes))``, ``a = sqrt(6 / (fan_in + fan_out))`` (Glorot's
#: uniform, Keras' default for ``Dense``), in float64 then cast; the biases are zero.
INIT = 6


def parameter_count(features: int, hidden: int | None, classes: int) -> int:
    """Weights and biases of the model: ``(features + 1) * classes`` without a hidden layer.

    >>> parameter_count(784, None, 10), parameter_count(784, 128, 10)
    (7850, 101770)
    """
    if hidden is None:
        return (features + 1) * classes
    return (features + 1) * hidden + (hidden + 1) * classes


def hidden_of(size: int, features: int, classes: int) -> int:
    """The hidden layer's width of a flat parameter vector of ``size`` entries.

    >>> hidden_of(101770, 784, 10)
    128
    """
    return (size - classes) // (features + 1 + classes)


def unpacked(flat, features: int, classes: int) -> tuple:
    """Views ``(W1, W2)`` of a hidden-layer model's flat parameters (any array library).

    The flat layout: ``W1`` ``(features + 1, hidden)`` row after row, its last row the
    hidden layer's bias ``b1``; then ``W2`` ``(hidden + 1, classes)``, its last row ``b2``.
    A step's gradient has the same layout.

    >>> import numpy as np
    >>> [w.shape for w in unpacked(np.zeros(101770), 784, 10)]
    [(785, 128), (129, 10)]
    """
    hidden = hidden_of(flat.shape[-1], features, classes)
    first = (features + 1) * hidden
    lead = flat.shape[:-1]
    return (flat[..., :first].reshape(*lead, features + 1, hidden),
            flat[..., first:].reshape(*lead, hidden + 1, classes))


#: ``spawn_key`` part of an epoch's ordering of the training rows, ``(EPOCH, epoch)``: with
#: ``--epochs`` and ``--batch-size B``, ``default_rng`` of that sequence draws
#: ``permutation(samples)`` of the training rows (numbered shard after shard), and step ``j``
#: of the epoch reads the rows at its positions ``j B`` to ``(j + 1) B - 1`` (the last step
#: fewer): every row once an epoch.
EPOCH = 7


def epoch_steps(samples: int, batch: int | None) -> int:
    """Steps of one epoch: ``ceil(samples / batch)``, or one full-batch step.

    >>> epoch_steps(3000, 400), epoch_steps(3000, None)
    (8, 1)
    """
    return 1 if batch is None else -(-samples // batch)


#: Adam's constants, scikit-learn's ``MLPClassifier(solver="adam")`` defaults (Keras' but
#: for its ``epsilon`` of 1e-7): ``beta_1``, ``beta_2``, ``epsilon``.
ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON = 0.9, 0.999, 1e-8
#: ``--learning-rate`` when none is given, by ``--optimizer``.
DEFAULT_RATES = {"sgd": 0.5, "adam": 0.001}


#: ``spawn_key`` part of the gradient probes, ``(PROBE,)``: ``default_rng`` of that sequence
#: draws ``standard_normal((PROBES, features + 1))`` (the ``r``), then
#: ``standard_normal((PROBES, classes))`` (the ``s``).
PROBE = 5
#: Random probes ``r^T G s`` of each cell's gradient ``G`` that a run reports (Freivalds).
#: With a hidden layer the probes are ``standard_normal((PROBES, parameters))`` of that
#: sequence, and a cell reports ``r . g`` of its flat gradient ``g`` for each.
PROBES = 4
#: Bytes of features in one cell of rows: on CPU workers a cell stays in the core's cache
#: between its two products (256 to 2048 rows of 784 float32 measured alike); on GPU workers
#: large enough to keep the device busy. At least ``MIN_CELL_ROWS`` rows (very wide rows).
CELL_BYTES = 2 << 20
DEVICE_CELL_BYTES = 128 << 20
MIN_CELL_ROWS = 64


def cell_rows(features: int, itemsize: int, library: str) -> int:
    """Rows of one cell: a pass reads its rows a cell at a time and reports each cell's sums.

    The cells of a pass are its rows (a shard's rows, or its mini-batch rows in order) cut
    into runs of this many, the last one shorter.

    >>> cell_rows(784, 4, "numpy"), cell_rows(784, 4, "cupy"), cell_rows(10**6, 8, "numpy")
    (668, 42799, 64)
    """
    budget = CELL_BYTES if library == "numpy" else DEVICE_CELL_BYTES
    return max(MIN_CELL_ROWS, budget // max(1, features * itemsize))


def cells_of(rows: int, cell: int) -> int:
    """Cells of ``rows`` rows read ``cell`` at a time.

    >>> cells_of(1000, 668), cells_of(668, 668)
    (2, 1)
    """
    return -(-rows // cell)


@dataclass(frozen=True)
class InputFiles:
    """Where an input's rows are read again: the features' and labels' sources and kinds.

    ``features`` and ``labels`` are :class:`~daskgpu.data.array_input.ArraySource` objects
    (a file, or an array in memory: never sent to a task whole) that the check reads through
    :func:`daskgpu.verification.replay.region`; ``rows``: the input's.
    """

    features: Any
    features_kind: str
    labels: Any
    labels_kind: str
    rows: int


@dataclass
class Kept:
    """What a presented run keeps beside its context (mutable, unlike the context)."""

    presented: bool = False
    final_weights: Any = None


@dataclass(frozen=True)
class TrainContext:
    """What train-pipeline's check (and its ``--output``) knows of a run.

    ``source`` is the input (None for a teacher's data); ``shards`` the shards kept on the
    workers (:class:`~daskgpu.toolkit.data_parallel.ShardKeys`: the training ones, then the
    test ones); ``training`` the arguments the steps are driven with; ``kept`` what
    presenting the run noted; ``optimizer`` ``"sgd"`` or ``"adam"``; ``epochs`` the passes
    asked for (``steps`` is then theirs, :func:`epoch_steps` each), None with ``--steps``.
    ``read_sizes``, ``scales`` and ``cells("steps")`` hold for steps that read all rows or
    a seeded sample; an epoch's steps read varying rows, which the check draws again.
    """

    samples: int
    features: int
    classes: int = 10
    steps: int = 1
    learning_rate: float = 0.5
    seed: int = 0
    batch: int | None = None
    hidden: int | None = None
    dtype: str = "float32"
    library: str = "numpy"
    train_sizes: tuple[int, ...] = ()
    test_sizes: tuple[int, ...] = ()
    source: InputFiles | None = None
    validation_fraction: float | None = None
    init_weights: str | None = None
    shards: Any = None
    training: tuple = ()
    kept: Kept = field(default_factory=Kept)
    optimizer: str = "sgd"
    epochs: int | None = None

    @property
    def in_epochs(self) -> bool:
        """Whether the steps' mini-batches are epochs' (``--epochs`` with ``--batch-size``)."""
        return self.epochs is not None and self.batch is not None

    @property
    def teacher(self) -> bool:
        """Whether the rows are a teacher's (generated), not an input's."""
        return self.source is None

    @property
    def cell(self) -> int:
        """Rows of one cell of a pass."""
        return cell_rows(self.features, np.dtype(self.dtype).itemsize, self.library)

    @property
    def parameters(self) -> int:
        """Weights and biases of the model."""
        return parameter_count(self.features, self.hidden, self.classes)

    @property
    def held_out(self) -> int:
        """Held-out rows of an input."""
        return input_held_out(self.source.rows, self.validation_fraction)

    @property
    def read_sizes(self) -> tuple[int, ...]:
        """Rows each training shard reads in a step: all, or its share of the mini-batch."""
        if self.batch is None:
            return self.train_sizes
        return tuple(batch_rows(self.batch, n, self.samples) for n in self.train_sizes)

    @property
    def scales(self) -> np.ndarray:
        """Each training shard's rows over the rows it reads in a step."""
        return np.array(self.train_sizes) / np.array(self.read_sizes)

    def cells(self, passed: str) -> Cells:
        """The cells of a pass: ``"steps"`` (a step's), ``"final"`` or ``"test"``, by shard."""
        sizes = {"steps": self.read_sizes, "final": self.train_sizes,
                 "test": self.test_sizes}[passed]
        return Cells(tuple(cells_of(n, self.cell) for n in sizes))
