"""The suite's environment: torch does its math with an optimized BLAS, and nothing leaves
the machine."""

import os
import socket
import urllib.error
import urllib.request

import pytest


def test_torch_uses_openblas(fig):
    """Debian's torch links libblas.so.3; it must resolve to OpenBLAS, not the reference BLAS."""
    import time

    import torch

    a = torch.randn(512, 512, dtype=torch.float64)
    t0 = time.perf_counter()
    for _ in range(8):
        a @ a
    gflops = 8 * 2 * 512**3 / (time.perf_counter() - t0) / 1e9
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if ".so" in line}
    # libblas.so.3 is what torch links; Debian's alternatives point it at OpenBLAS's copy
    # (.../openblas-pthread/libblas.so.3) or at the reference one (.../blas/libblas.so.3).
    # (numpy's wheel brings its own OpenBLAS, which says nothing about torch's.)
    blas = sorted(p for p in libs if os.path.basename(p).startswith("libblas.so"))
    fig(torch=torch.__version__, libblas=blas, float64_gflops=round(gflops, 1))
    assert blas and all("openblas" in p for p in blas), f"torch's libblas.so.3 is not OpenBLAS: {blas}"


def test_hubs_unreachable():
    """HF_HUB_OFFLINE/HF_DATASETS_OFFLINE are set and outside HTTP goes to a closed loopback port."""
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("https://huggingface.co/api/models", timeout=5)
    import datasets

    with pytest.raises(Exception):
        datasets.load_dataset("openai/gsm8k", "main")


def test_localhost_not_proxied():
    base = os.environ["TINKER_BASE_URL"]
    with urllib.request.urlopen(base + "/api/v1/healthz", timeout=5) as r:
        assert r.status == 200
    host, port = base.removeprefix("http://").split(":")
    socket.create_connection((host, int(port)), timeout=5).close()
