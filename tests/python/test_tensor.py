# Tensors to and from numpy and PyTorch, without copies where the layout
# allows; operators and indexing; bad input raising clear errors.
import numpy as np
import pytest

import kiln


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = kiln.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == kiln.float32 and str(t.device) == "cpu"
    a[1, 2] = 100.0
    back = np.asarray(t)
    assert back[1, 2] == 100.0
    assert back.ctypes.data == a.ctypes.data  # the same memory, no copy
    back[0, 0] = -1.0
    assert a[0, 0] == -1.0
    assert memoryview(t).shape == (3, 4)


@pytest.mark.parametrize("dtype,kdtype", [(np.float32, kiln.float32), (np.float64, kiln.float64),
                                          (np.float16, kiln.float16), (np.int32, kiln.int32),
                                          (np.int64, kiln.int64), (np.uint8, kiln.uint8)])
def test_round_trip_every_dtype(dtype, kdtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    t = kiln.tensor(a)
    assert t.dtype == kdtype
    assert np.array_equal(np.asarray(t), a) and np.asarray(t).dtype == a.dtype
    a[0, 0, 0] = 5  # kiln.tensor copies
    assert np.asarray(t)[0, 0, 0] == 0


def test_strided_numpy_views_are_shared_without_a_copy():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    view = a[::2, 1:4]  # not contiguous
    t = kiln.from_numpy(view)
    assert not t.is_contiguous()
    assert np.array_equal(np.asarray(t), view)
    assert np.array_equal(np.asarray(t.contiguous()), view)
    a[2, 2] = 99
    assert np.asarray(t)[1, 1] == 99
    assert np.array_equal(np.asarray(kiln.from_numpy(a.T)), a.T)


def test_tensor_views_go_to_numpy_with_their_strides():
    t = kiln.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert np.array_equal(np.asarray(t.T), np.arange(12, dtype=np.float32).reshape(3, 4).T)
    assert np.array_equal(np.asarray(t[1:, ::2]), np.arange(12, dtype=np.float32).reshape(3, 4)[1:, ::2])


def test_python_lists_and_numbers_become_float32_and_int64():
    assert kiln.tensor([[1.0, 2.5]]).dtype == kiln.float32
    assert kiln.tensor([1, 2]).dtype == kiln.int64
    assert kiln.tensor(3.0).item() == 3.0
    assert kiln.tensor([1, 2], dtype=kiln.float64).dtype == kiln.float64


def test_dlpack_with_pytorch_both_ways(torch):
    t = kiln.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    pt = torch.from_dlpack(t)
    assert pt.shape == (2, 3) and pt.dtype == torch.float32
    pt[0, 1] = 7.0  # shared
    assert np.asarray(t)[0, 1] == 7.0
    src = torch.arange(8, dtype=torch.float64).reshape(2, 4)
    k = kiln.from_dlpack(src)
    assert k.dtype == kiln.float64 and k.shape == (2, 4)
    src[1, 3] = -5
    assert np.asarray(k)[1, 3] == -5
    strided = kiln.from_dlpack(src.t())  # a transposed view keeps its strides
    assert np.array_equal(np.asarray(strided), src.t().numpy())
    bf = kiln.from_dlpack(torch.ones(3, dtype=torch.bfloat16))
    assert bf.dtype == kiln.bfloat16
    assert torch.equal(torch.from_dlpack(bf), torch.ones(3, dtype=torch.bfloat16))
    assert np.array_equal(np.asarray(kiln.from_dlpack(np.arange(3.0))), np.arange(3.0))


def test_exported_memory_outlives_the_tensor(torch):
    t = kiln.tensor(np.full(1000, 3.0, dtype=np.float32))
    pt = torch.from_dlpack(t)
    del t
    assert float(pt.sum()) == 3000.0


def test_operators_broadcast_and_take_scalars():
    a = kiln.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = kiln.tensor([10.0, 20.0])
    assert np.array_equal(np.asarray(a + b), [[11, 22], [13, 24]])
    assert np.array_equal(np.asarray(2 - a), [[1, 0], [-1, -2]])
    assert np.allclose(np.asarray(a / 3), np.array([[1, 2], [3, 4]], dtype=np.float32) / np.float32(3), rtol=0)
    assert np.array_equal(np.asarray(a @ a), [[7, 10], [15, 22]])
    assert np.array_equal(np.asarray(a ** 2), [[1, 4], [9, 16]])
    assert np.array_equal(np.asarray(-a * 2), [[-2, -4], [-6, -8]])
    assert np.array_equal(np.asarray(a > 2.5), [[0, 0], [1, 1]])
    assert a.sum().item() == 10 and a.mean(dim=[0]).tolist() == [2.0, 3.0]


def test_indexing():
    t = kiln.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    ref = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for key in [1, -1, (0, 2), (slice(None), 1), (1, slice(1, 3), slice(None, None, 2)), (Ellipsis, 3),
                (None, 0), (0, Ellipsis, None)]:
        assert np.array_equal(np.asarray(t[key]), ref[key]), key
    with pytest.raises(IndexError, match="out of bounds"):
        t[2]
    with pytest.raises(TypeError, match="ints, slices"):
        t["a"]


def test_bad_input_raises_clear_errors():
    with pytest.raises(TypeError, match="numpy dtype bool has no Kiln dtype"):
        kiln.from_numpy(np.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match="strides .* are negative"):
        kiln.from_numpy(np.arange(5.0)[::-1])
    with pytest.raises(TypeError, match="bfloat16|bf16 tensor has no numpy dtype"):
        np.asarray(kiln.ones([2], dtype=kiln.bfloat16))
    with pytest.raises(kiln.KilnError) as e:
        kiln.matmul(kiln.ones([2, 3]), kiln.ones([2, 3]))
    assert "3" in str(e.value) and isinstance(e.value, RuntimeError)
    with pytest.raises(kiln.KilnError):
        kiln.ones([2, 3]) + kiln.ones([4])
    with pytest.raises(TypeError, match="only floating-point tensors"):
        kiln.tensor([1, 2]).requires_grad = True
    with pytest.raises(ValueError, match="ambiguous"):
        bool(kiln.ones([2]))
    with pytest.raises(ValueError, match="shape"):
        kiln.zeros([2]).copy_(kiln.ones([3]))
