// Fused cross-entropy: per-row loss and dlogits in one kernel.
//
//  loss[i]       = logsumexp(logits[i]) - logits[i, t_i]     (0 where t_i == ignore_index)
//  dlogits[i, j] = (softmax(logits[i])_j - [j == t_i]) * scale (0 rows where ignored)
//
// logits [N, C] contiguous; targets [N] i32/i64; losses [N] f32 or logits'
// dtype; dlogits (optional) like logits and may be logits itself: each
// element is read before it is overwritten by the same thread, and the target
// logit is read before the first reduction's barrier. A warp per row when
// C <= 1024, a 256-thread block otherwise. f32 compute for bf16/f16.
// A target outside [0, C) that is not ignore_index is recorded in the
// device's input-check slots and thrown at the next synchronisation
// (cuda_util.h); its row gets no loss and no gradient.
#include "kiln/cuda/cuda_backend.h"
#include "kiln/cuda/cuda_util.h"
#include "kiln/cuda/row_reduce.cuh"

namespace kiln::cuda {
namespace {

template <typename T, int GROUP>
__global__ void cross_entropy_kernel(const T* logits, const void* targets, bool targets_i64, void* losses,
                                     bool losses_f32, T* dlogits, float scale, int64_t ignore_index, int64_t rows,
                                     int64_t C, int* error_flag) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  RowSlot<GROUP> slot;
  if (slot.row >= rows) return;
  const T* x = logits + slot.row * C;
  const int64_t t = load_index(targets, targets_i64, slot.row);
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= C);
  if (bad && slot.lane == 0)
    atomicCAS(error_flag, 0, int(slot.row < (int64_t(1) << 30) ? slot.row : (int64_t(1) << 30)) + 1);
  const bool counts = !ignored && !bad;
  const A x_target = counts ? to_acc(x[t]) : A(0);

  A m = neg_infinity<A>();
  for (int64_t j = slot.lane; j < C; j += GROUP) m = max_nan(m, to_acc(x[j]));
  m = group_max<GROUP>(m, scratch);
  A s = 0;
  for (int64_t j = slot.lane; j < C; j += GROUP) s += exp_acc(to_acc(x[j]) - m);
  s = group_sum<GROUP>(s, scratch);

  if (slot.lane == 0) {
    A loss = counts ? m + log_acc(s) - x_target : A(0);
    if (losses_f32)
      static_cast<float*>(losses)[slot.row] = float(loss);
    else
      static_cast<T*>(losses)[slot.row] = from_acc<T>(loss);
  }
  if (dlogits) {
    T* d = dlogits + slot.row * C;
    const A inv = A(1) / s, sc = A(scale);
    for (int64_t j = slot.lane; j < C; j += GROUP) {
      A g = counts ? (exp_acc(to_acc(x[j]) - m) * inv - (j == t ? A(1) : A(0))) * sc : A(0);
      d[j] = from_acc<T>(g);
    }
  }
}

}  // namespace

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& dlogits,
                                float dlogits_scale, int64_t ignore_index) {
  const char* op = "cross_entropy";
  check_cuda(logits, op, "logits");
  check_cuda(targets, op, "targets");
  check_cuda(losses, op, "losses");
  check_same_device(logits, targets, op);
  check_same_device(logits, losses, op);
  check_contiguous(logits, op, "logits");
  KILN_CHECK(logits.dim() == 2, "cross_entropy: logits must be [N, C], got ", shape_str(logits.shape()));
  const int64_t N = logits.size(0), C = logits.size(1);
  KILN_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64,
             "cross_entropy: targets must be i32 or i64, got ", dtype_name(targets.dtype()));
  check_shape(targets, {N}, op, "targets");
  check_shape(losses, {N}, op, "losses");
  KILN_CHECK(losses.dtype() == DType::f32 || losses.dtype() == logits.dtype(), "cross_entropy: losses must be f32 or ",
             dtype_name(logits.dtype()), ", got ", dtype_name(losses.dtype()));
  Tensor tgt = contiguous_or_copy(targets);
  Tensor loss_out = losses.is_contiguous() ? losses : empty_workspace(losses.shape(), losses.dtype(), losses.device());
  if (dlogits.defined()) {
    check_cuda(dlogits, op, "dlogits");
    check_same_device(logits, dlogits, op);
    check_contiguous(dlogits, op, "dlogits");
    check_shape(dlogits, logits.shape(), op, "dlogits");
    check_dtype(dlogits, logits.dtype(), op, "dlogits");
  }
  if (N == 0) return;
  KILN_CHECK(C > 0, "cross_entropy: logits have no classes (C = 0)");
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_for(dev);
  int* flag = input_check_slot(dev, InputCheck::cross_entropy, [C, ignore_index](int64_t row) {
    return ::kiln::detail::concat("cross_entropy: targets[", row, "] is outside [0, ", C,
                                  ") and is not ignore_index (", ignore_index, ")");
  });
  dispatch_floating(logits.dtype(), op, [&]<typename T>() {
    T* dl = dlogits.defined() ? ptr<T>(dlogits) : nullptr;
    const bool i64 = tgt.dtype() == DType::i64, f32 = loss_out.dtype() == DType::f32;
    if (C <= 1024)
      cross_entropy_kernel<T, 32>
          <<<unsigned(ceil_div(N, 8)), 256, 0, stream>>>(ptr<const T>(logits), tgt.data_ptr(), i64, loss_out.data_ptr(),
                                                         f32, dl, dlogits_scale, ignore_index, N, C, flag);
    else
      cross_entropy_kernel<T, 256><<<unsigned(N), 256, 0, stream>>>(ptr<const T>(logits), tgt.data_ptr(), i64,
                                                                    loss_out.data_ptr(), f32, dl, dlogits_scale,
                                                                    ignore_index, N, C, flag);
  });
  KILN_CUDA_CHECK_LAUNCH();
  if (!loss_out.same_storage(losses) || loss_out.data_ptr() != losses.data_ptr()) copy_on_device(loss_out, losses);
}

}  // namespace kiln::cuda
