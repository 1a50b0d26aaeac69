"""The cuDNN graph's operand checks: they run before cuDNN, so they are tested without it."""

import numpy as np
import pytest

from kernels.harness import cudnn_conv


class FakeGpuArray:
    """Just enough of a GPU array for the checks: shape, dtype and a __cuda_array_interface__."""

    def __init__(self, shape, dtype, ptr=4096):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.__cuda_array_interface__ = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (ptr, False),
            "strides": None,
            "version": 3,
        }


SHAPES = cudnn_conv.operand_shapes(2, 8, 7, 9, 16, 3, 3, pad=1, stride=2, layout="nhwc")


def operands(dtype=np.float16, **shapes):
    shapes = {**SHAPES, **shapes}
    return [FakeGpuArray(shapes[name], dtype, ptr) for name, ptr in (("x", 256), ("w", 512), ("y", 768))]


def test_operand_shapes_follow_the_layout():
    assert SHAPES == {"x": (2, 7, 9, 8), "w": (16, 3, 3, 8), "y": (2, 4, 5, 16)}
    assert cudnn_conv.operand_shapes(2, 8, 7, 9, 16, 3, 3, pad=1, stride=2, layout="nchw") == {
        "x": (2, 8, 7, 9),
        "w": (16, 8, 3, 3),
        "y": (2, 16, 4, 5),
    }
    with pytest.raises(ValueError, match="layout must be one of"):
        cudnn_conv.operand_shapes(2, 8, 7, 9, 16, 3, 3, pad=1, stride=2, layout="chwn")


def test_device_pointers_of_right_operands():
    assert cudnn_conv.device_pointers(*operands(), SHAPES, np.float16) == (256, 512, 768)


def test_device_pointers_refuse_wrong_operands():
    with pytest.raises(TypeError, match="x: expected dtype float16, got float32"):
        cudnn_conv.device_pointers(*operands(np.float32), SHAPES, np.float16)
    with pytest.raises(ValueError, match=r"y: expected shape \(2, 4, 5, 16\), got \(2, 4, 5, 8\)"):
        cudnn_conv.device_pointers(*operands(y=(2, 4, 5, 8)), SHAPES, np.float16)
    x, w, y = operands()
    with pytest.raises(TypeError, match="w: .*(device|GPU) array"):
        cudnn_conv.device_pointers(x, np.zeros(SHAPES["w"], np.float16), y, SHAPES, np.float16)


def test_launcher_and_time_plans_check_operands_before_cuda():
    """A wrong operand raises from the launcher, and time_plans does not file it as a failed plan."""
    conv = object.__new__(cudnn_conv.ConvFprop)  # no cuDNN here: only what the checks read
    conv.shapes, conv.dtype = SHAPES, np.float16
    x, w, y = operands()
    small = FakeGpuArray((2, 4, 5, 8), np.float16)
    with pytest.raises(ValueError, match="y: expected shape"):
        conv.launcher(0, x, w, small)
    with pytest.raises(ValueError, match="y: expected shape"):
        conv.time_plans(x, w, small)
