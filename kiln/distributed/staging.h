// Host staging shared by the CPU transports (MPI, Gloo): they move bytes
// between host buffers, so a device tensor, a strided view or a 2-byte float
// that must be reduced goes through a contiguous host copy, and the result is
// copied back into the caller's tensor.
#pragma once
#include "kiln/backend/factory.h"
#include "kiln/core/error.h"

namespace kiln::distributed {

// The dtypes the transports add up as they are; others are reduced in f32.
inline bool reducible_as_is(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::i64 || t == DType::i32;
}

// A contiguous host tensor with t's values that a transport can work on: t
// itself when it already is one, else a copy (f32 for 2-byte floats when
// reducing).
inline Tensor staged(const Tensor& t, bool reducing) {
  const DType want = reducing && !reducible_as_is(t.dtype()) ? DType::f32 : t.dtype();
  if (t.device().is_cpu() && t.is_contiguous() && want == t.dtype()) return t;
  return copy_to(t, Device::cpu(), want);
}

// A contiguous host copy that the transport may overwrite (t stays as it is).
inline Tensor staged_copy(const Tensor& t, bool reducing) {
  const DType want = reducing && !reducible_as_is(t.dtype()) ? DType::f32 : t.dtype();
  return copy_to(t, Device::cpu(), want);
}

// Puts a staged result back where the caller expects it (nothing to do when
// the transport worked on the caller's tensor itself).
inline void write_back(const Tensor& host, Tensor& t) {
  if (host.impl_ptr() != t.impl_ptr()) copy_into(host, t);
}

// The sum of `ranks` ranks' values becomes their mean, in place.
inline void divide_by_ranks(Tensor& host_sum, int ranks) {
  KILN_CHECK(host_sum.dtype() == DType::f32 || host_sum.dtype() == DType::f64, "an average needs floating-point values");
  backend_for(host_sum).unary(UnaryOp::mul_scalar, host_sum, host_sum, 1.0 / double(ranks));
}

}  // namespace kiln::distributed
