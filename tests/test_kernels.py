"""Each kernel against its reference in float64, on shapes that are not multiples of any block.

CPU: the Triton interpreter, fp16 and fp32. GPU (marked): bf16 too, and long rows.
"""
import pytest
import torch

from kernels import softmax, vector_add
from runners.check import TOLERANCES, compare
from tests.conftest import HAS_CUDA

CPU_DTYPES = ["float32", "float16"]
DEVICE = "cuda" if HAS_CUDA else "cpu"


def _check(spec, shape, dtype_name, config, seed=0):
    dtype = getattr(torch, dtype_name)
    inputs = spec.make_inputs(shape, dtype, seed, torch.device(DEVICE))
    assert all(x.abs().sum() > 0 for x in inputs)  # never zeros
    out = spec.output_like(inputs).fill_(float("nan"))  # poisoned: unwritten elements stay NaN
    spec.launch(inputs, out, config)
    reference = spec.reference(*(x.double() for x in inputs))
    assert compare(out, reference, dtype_name) is None


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("n, block", [(1, 64), (1823, 256), (1823 * 781 // 128, 1024)])
def test_vector_add(n, block, dtype):
    _check(vector_add.SPEC, (n,), dtype, {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1})


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("shape, block", [((6, 42), 64), ((37, 781), 1024), ((3, 1823), 2048), ((1, 1), 1)])
def test_softmax(shape, block, dtype):
    _check(softmax.SPEC, shape, dtype, {"BLOCK_SIZE": block, "num_warps": 4, "num_stages": 1})


def test_softmax_rows_sum_to_one_on_a_strided_input():
    x = torch.randn(12, 200, device=DEVICE)[:, :123]  # row stride 200, 123 columns
    y = softmax.softmax(x)
    torch.testing.assert_close(y.sum(dim=1), torch.ones(12, device=DEVICE))
    assert compare(y, softmax.softmax_ref(x.double()), "float32") is None


def test_launchers_reject_bad_blocks_with_a_message():
    x = torch.randn(4, 100, device=DEVICE)
    with pytest.raises(ValueError, match="BLOCK_SIZE must be a power of 2 >= the row length 100"):
        softmax.softmax(x, BLOCK_SIZE=64)
    with pytest.raises(ValueError, match="BLOCK_SIZE must be a power of 2"):
        vector_add.vector_add(x, x, BLOCK_SIZE=100)


def test_constraints_prune_with_a_reason():
    assert "one program must hold a whole row" in softmax.SPEC.constraints((8, 4096), "float16", {"BLOCK_SIZE": 1024})
    assert "masked off" in softmax.SPEC.constraints((8, 1000), "float16", {"BLOCK_SIZE": 4096})
    assert softmax.SPEC.constraints((8, 1000), "float16", {"BLOCK_SIZE": 1024}) is None


def test_byte_models_count_each_input_once_and_each_output_once():
    assert vector_add.SPEC.bytes_moved((1000,), torch.float16) == 3 * 1000 * 2
    assert softmax.SPEC.bytes_moved((64, 100), torch.float32) == 2 * 64 * 100 * 4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gpu_kernels_all_dtypes(dtype):
    _check(vector_add.SPEC, (1823 * 781,), dtype, {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1})
    _check(softmax.SPEC, (1823, 781), dtype, {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1})


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_softmax_long_rows(dtype):
    _check(softmax.SPEC, (64, 60_001), dtype, {"BLOCK_SIZE": 65536, "num_warps": 32, "num_stages": 1})


def test_tolerances_cover_every_supported_dtype():
    assert set(vector_add.SPEC.dtypes) | set(softmax.SPEC.dtypes) <= set(TOLERANCES)
