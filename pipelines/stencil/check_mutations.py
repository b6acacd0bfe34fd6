"""The wrong results stencil-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification import Mutation


def _scaled(raw: dict, factor: float) -> dict:
    """``raw`` as a run whose grid is ``factor`` times this one would report it."""
    return dict(raw, probes=np.asarray(raw["probes"]) * factor, l2_norm=raw["l2_norm"] * factor)


def _decay_seen(raw: dict) -> float:
    """lambda^s as the centre probe shows it: u over u0 there."""
    return float(raw["probes"][0] / raw["probes_u0"][0])


# What a failed check's detail names (a regular expression, see Mutation.names).
DECAYED = r"u decayed as after \d+ steps of alpha \S+, not \d+"
MUTATIONS = (
    Mutation("no-op (u = u0)", lambda raw: _scaled(raw, 1 / _decay_seen(raw)),
             r"u did not move from u0"),
    Mutation("wrong step count (twice the steps)",
             lambda raw: _scaled(raw, _decay_seen(raw)), DECAYED),
    # For small 1 - lambda, halving alpha halves the exponent: the decay becomes about sqrt(g).
    Mutation("wrong alpha (half of it)",
             lambda raw: _scaled(raw, 1 / math.sqrt(_decay_seen(raw))), DECAYED),
    Mutation("l2_norm set to 0", lambda raw: dict(raw, l2_norm=0.0), r"^l2_norm 0 against"),
    Mutation("l2_norm scaled by 1.001", lambda raw: dict(raw, l2_norm=raw["l2_norm"] * 1.001),
             r"^l2_norm \S+ against lambda\^s"),
)
