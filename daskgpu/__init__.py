"""daskgpu: large array and dataframe computations on the GPUs you choose, with Dask.

>>> import daskgpu
>>> with daskgpu.cluster(cpu=True, workers=2) as client:  # doctest: +SKIP
...     result = daskgpu.run("mean-pipeline", client=client, size=20_000)
"""

from daskgpu import config as _config  # noqa: F401  (loads daskgpu.yaml into dask.config)
from daskgpu.backends import Backend
from daskgpu.backends import get as get_backend
from daskgpu.clusters import cluster
from daskgpu.devices import Device, inventory
from daskgpu.devices import select as select_devices
from daskgpu.errors import DaskGPUError
from daskgpu.registry import Pipeline, Verification, Workload, pipeline
from daskgpu.registry import get as get_pipeline
from daskgpu.registry import names as pipeline_names
from daskgpu.runner import RunResult, run

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "DaskGPUError",
    "Device",
    "Pipeline",
    "RunResult",
    "Verification",
    "Workload",
    "cluster",
    "get_backend",
    "get_pipeline",
    "inventory",
    "pipeline",
    "pipeline_names",
    "run",
    "select_devices",
]
