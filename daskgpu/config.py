"""daskgpu's defaults in ``dask.config`` under ``daskgpu.*``, overridable by ``DASKGPU_*``."""

from __future__ import annotations

import os
import pathlib

import dask.config
import yaml

_DEFAULTS = pathlib.Path(__file__).with_name("daskgpu.yaml")
_ENV_PREFIX = "DASKGPU_"
# Variables that are command-line options, not configuration keys.
_NOT_CONFIG = {"DASKGPU_GPUS"}


def _env_overrides(environ: os._Environ | dict) -> dict:
    """``DASKGPU_CPU__CHUNK_BYTES=64MiB`` -> ``{"daskgpu": {"cpu": {"chunk-bytes": "64MiB"}}}``."""
    out: dict = {}
    for name, value in environ.items():
        if not name.startswith(_ENV_PREFIX) or name in _NOT_CONFIG:
            continue
        path = [part.lower().replace("_", "-") for part in name[len(_ENV_PREFIX) :].split("__")]
        node = out.setdefault("daskgpu", {})
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = yaml.safe_load(value) if value else value
    return out


def load() -> None:
    """Load the packaged defaults, then ``DASKGPU_*`` environment overrides, into dask.config."""
    defaults = yaml.safe_load(_DEFAULTS.read_text())
    dask.config.update_defaults(defaults)
    overrides = _env_overrides(os.environ)
    if overrides:
        dask.config.update(dask.config.config, overrides, priority="new")


def get(key: str):
    """A daskgpu setting, e.g. ``get("cpu.chunk-bytes")``."""
    try:
        return dask.config.get(f"daskgpu.{key}")
    except KeyError:
        # A ``dask.config.set`` of a daskgpu key entered before the defaults loaded takes
        # the whole ``daskgpu`` section with it as it ends: load them again.
        load()
        return dask.config.get(f"daskgpu.{key}")


def scheduler_settings() -> dict:
    """The distributed settings a scheduler that daskgpu starts gets from ``daskgpu.faults``.

    For ``dask.config.set`` around the cluster's creation: the scheduler reads them then.

    Returns
    -------
    dict
        ``{"distributed.scheduler.allowed-failures": 3, ...}``.
    """
    return {
        "distributed.scheduler.allowed-failures": int(get("faults.allowed-failures")),
        "distributed.scheduler.no-workers-timeout": get("faults.no-workers-timeout"),
    }


load()
