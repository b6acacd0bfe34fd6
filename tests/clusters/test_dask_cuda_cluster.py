"""dask-cuda's real LocalCUDACluster, started by daskgpu against made-up GPUs (the fake NVML).

No CUDA is needed: the workers' own CUDA context fails to start (there is no driver) and they
go on. What is checked is what each worker is handed: its device, the CUDA device order, and
what happens where NVML cannot report CPU affinity (common in VMs and containers), with whole
GPUs, MIG instances and a preset ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import TWO_GPUS, fake_nvml_env

pytest.importorskip("dask_cuda")

MIG = "MIG-7c1d2e3f-0000-1111-2222-333344445555"
WITH_MIG = {"gpus": [TWO_GPUS["gpus"][0],
                     {**TWO_GPUS["gpus"][1], "migs": [{"uuid": MIG, "memory_total": 2**34}]}]}

# Run in a fresh process: the fake pynvml must be the one dask-cuda imports, in the client and
# in every worker. CuPy is not installed here; the plan is told the GPU stack is.
PROBE = """
import json, os, sys
import daskgpu
import daskgpu.clusters.cuda_probe
import daskgpu.clusters.devices
import daskgpu.toolkit.backends
from daskgpu.errors import DaskGPUError

daskgpu.toolkit.backends.gpu_stack_missing = lambda: []
daskgpu.clusters.devices.cuda_driver_problem = lambda: None  # as if libcuda loaded
daskgpu.clusters.cuda_probe.check_kernel_launch = lambda client: None  # no kernel can run here


def handed():
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "order": os.environ.get("CUDA_DEVICE_ORDER")}


if __name__ == "__main__":
    try:
        with daskgpu.cluster(gpus=sys.argv[1], dashboard=False) as session:
            views = sorted(session.client.run(handed).values(), key=lambda v: v["visible"])
            print(json.dumps({"workers": views, "notices": list(session.notices)}))
    except DaskGPUError as exc:
        print(json.dumps({"error": str(exc)}))
"""


def _start(tmp_path, gpus: str, spec: dict, **env) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    environ = {**fake_nvml_env(spec), **env}
    done = subprocess.run([sys.executable, str(script), gpus], env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_whole_gpus_start_where_nvml_has_no_cpu_affinity(tmp_path):
    # With UUIDs dask-cuda 26.10 raised "TypeError: %d format: a real number is required".
    got = _start(tmp_path, "1,0", {**TWO_GPUS, "cpu_affinity": "unsupported"})
    assert "error" not in got, got
    # dask-cuda hands each worker the list rotated to put its own device first.
    assert got["workers"] == [{"visible": "0,1", "order": "PCI_BUS_ID"},
                              {"visible": "1,0", "order": "PCI_BUS_ID"}]
    assert any("closest to the GPUs" in n for n in got["notices"])


def test_preset_cuda_visible_devices_selects_by_position(tmp_path):
    got = _start(tmp_path, "0", TWO_GPUS, CUDA_VISIBLE_DEVICES="1")
    assert got["workers"] == [{"visible": "1", "order": "PCI_BUS_ID"}]
    assert got["notices"] == []


def test_mig_instance_is_handed_over_by_uuid(tmp_path):
    got = _start(tmp_path, MIG, WITH_MIG)
    assert got["workers"] == [{"visible": MIG, "order": "PCI_BUS_ID"}]


def test_mig_where_nvml_has_no_cpu_affinity_is_one_line(tmp_path):
    got = _start(tmp_path, MIG, {**WITH_MIG, "cpu_affinity": "unsupported"})
    error = got["error"]
    assert "GPU cluster on GPU 1/mig0 failed to start" in error and "\n" not in error
    assert "select whole GPUs by index" in error
