"""examples/mnist_mlp.py runs as a user runs it: its small twin fits both networks, verified,
and prints what each learned and how long each took."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_the_small_twin_fits_both_networks_and_prints_their_accuracies_and_times():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "mnist_mlp.py"),
                           "--samples", "3000", "--workers", "2"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "data: 3000 training rows, 500 test rows, 784 float32 features in [0, 1]" in out
    assert "Dense(128, relu) -> Dense(10, softmax), Adam, 5 epochs of batches of 128" in out
    ours = re.search(r"daskgpu MLPClassifier: accuracy (0\.\d{4}), fit (\d+\.\d+) s \(train "
                     r"\d+\.\d+ s, verify \d+\.\d+ s\), verified: True \(fast\) on 2 CPU "
                     r"workers", out)
    theirs = re.search(r"scikit-learn MLPClassifier: accuracy (0\.\d{4}), fit (\d+\.\d+) s", out)
    assert ours and theirs, out
    common = float(re.search(r"most common class (0\.\d{3})", out).group(1))
    for found in (ours, theirs):  # both learned the teacher's rule, about as well
        assert 2 * common < float(found.group(1)) <= 1.0 and float(found.group(2)) > 0, out
    assert abs(float(ours.group(1)) - float(theirs.group(1))) <= 0.05, out
    ratio = float(theirs.group(2)) / float(ours.group(2))
    assert f"fit time, scikit-learn / daskgpu: {ratio:.2f}x" in out, out
