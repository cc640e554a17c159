"""--device for the scan: a clear error without CUDA; on a GPU, the vectors the CPU certifies (gpu marker)."""

from __future__ import annotations

import pytest
import torch

from geodrift.continuity import MeasureSpec, decompose
from geodrift.errors import GeodriftError
from geodrift.krylov import TARGET_COS
from geodrift.scanner.scan import load_weights


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_a_scan_on_cuda_without_a_gpu_is_a_one_line_error_before_any_work():
    with pytest.raises(GeodriftError, match="--device cuda: no CUDA device"):
        MeasureSpec(device="cuda")
    with pytest.raises(GeodriftError, match="unknown 'tpu'"):
        MeasureSpec(device="tpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_scan_on_cuda_gives_the_cpu_vectors_to_the_acceptance_rule():
    ws, _ = load_weights(None, layers=[0, 1, 2])
    cpu = decompose(ws, MeasureSpec(k=8))
    gpu = decompose(ws, MeasureSpec(k=8, device="cuda"))
    for key, t in cpu.items():
        g = gpu[key]
        assert g.U.device.type == "cpu" and g.method in ("krylov", "lanczos", "exact", "exact-gram")
        cos_v = (t.Vh.double() * g.Vh.double()).sum(1).abs()
        cos_u = (t.U.double() * g.U.double()).sum(0).abs()
        # Each side is within 0.999 of the exact vector, so the two within cos(2 arccos 0.999).
        assert float(torch.minimum(cos_u, cos_v).min()) >= 2 * TARGET_COS**2 - 1, key
