"""Which BLAS this process's torch multiplies matrices with, and how fast.

Debian's python3-torch links libblas.so.3, which the alternatives system points at the
unoptimised reference BLAS (about 7 GFLOP/s) unless an optimised one (OpenBLAS: apt-get
install libopenblas0-pthread) is installed. A benchmark against that reference says nothing,
so the bench scripts report what they ran on and `tuft-bench` refuses a ratio against it.
"""
import ctypes
import os
import statistics
import time

import torch


def blas_info(threads):
    """Returns {"library", "kind", "gemm_gflops"} for the BLAS torch uses."""
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    torch.mm(a, b)  # loads the BLAS where it is loaded lazily
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path).lower()
                if path.startswith("/") and any(k in base for k in ("blas", "mkl", "blis", "atlas")) and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    config = torch.__config__.show()
    kind, library = "unknown", ", ".join(libs) or "linked into torch"
    joined = " ".join(libs).lower()
    if "openblas" in joined:
        kind = "openblas"
    elif "mkl" in joined or "BLAS_INFO=mkl" in config:
        kind = "mkl"
    elif "blis" in joined:
        kind = "blis"
    elif "atlas" in joined:
        kind = "atlas"
    elif any(os.path.basename(os.path.dirname(p)) == "blas" for p in libs):
        kind = "reference"  # Debian's /usr/lib/<triplet>/blas/libblas.so.3
    core = ""
    if kind == "openblas":
        core = openblas_core(libs)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    gflops = 2 * 1024 ** 3 / statistics.median(times) / 1e9
    return {"library": library, "kind": kind, "gemm_gflops": gflops, "threads": threads, "core": core,
            "coretype_env": os.environ.get("OPENBLAS_CORETYPE", ""),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "")}


def openblas_core(libs):
    """The kernels' core OpenBLAS runs with (openblas_get_corename), "" if it cannot say."""
    for path in libs:
        if "openblas" not in os.path.basename(path).lower():
            continue
        try:
            f = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_char_p
        return f().decode()
    return ""
