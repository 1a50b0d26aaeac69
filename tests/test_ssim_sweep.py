"""scripts/ssim_sweep.py: the source rewrites behind each variant (the sweep itself needs a GPU)."""

import re

import pytest

import ssim_sweep
from kernels.harness import cuda_cpp
from kernels.ssim import cuda_versions


def declaration(text: str, kernel: str) -> str:
    return re.search(rf"__global__ void (\S+)\s+{kernel}\(", text).group(1)


def test_the_cap_goes_on_the_kernel_declaration_not_a_comment():
    """V12's comment above the kernel names __maxnreg__(128) first; the declaration must change."""
    text = ssim_sweep.rewrite("V12", rows=108, regs=160)
    assert declaration(text, "ssim_v12") == "__maxnreg__(160)"
    assert "// __maxnreg__(128)" in text and "constexpr int kRows = 108;" in text


def test_only_the_swept_kernel_is_capped():
    text = ssim_sweep.rewrite("V13", rows=72, regs=96)
    assert declaration(text, "ssim_v13") == "__maxnreg__(96)"
    assert declaration(text, "ssim_v13_mean") == "__launch_bounds__(kThreads)"


def test_uncapped_v3_compiles_with_its_own_block_size(tmp_path):
    """V3 has no kThreads: an uncapped variant bounds the block by the number of threads it launches."""
    text = ssim_sweep.rewrite("V3", rows=64, regs=0)
    assert declaration(text, "ssim_v3") == f"__launch_bounds__({cuda_versions.geometry('V3')['threads']})"
    path = tmp_path / "v3.cu"
    path.write_text(text)
    src = cuda_cpp.source_path(cuda_versions.source("V3"))
    assert cuda_cpp.compile_cubin(path, "sm_90", (f"-I{src.parent}",)).resources


@pytest.mark.parametrize("option, constant", [("unroll", "kUnroll"), ("stages", "kStages"), ("cols", "kColsPerThread")])
def test_an_option_the_file_lacks_is_refused(option, constant):
    with pytest.raises(ValueError, match=f"no {constant} in the file"):
        ssim_sweep.rewrite("V3", rows=64, regs=0, **{option: 2})
