// bf16/f16 on the CPU. The CPU kernels compute in f32 and f64 only; an op
// that receives a bf16/f16 operand instead runs its f32 kernel on staged f32
// copies and rounds each result back to its storage dtype once. That is
// what CPU autocast means numerically (PyTorch's CPU bf16 kernels also
// accumulate in f32), and it keeps one kernel per op instead of three.
//
// Each CpuBackend method opts in with one line at its top:
//
//   if (any_low_precision({&x, &out}))
//     return in_f32([&](F32Staging& s) { unary(op, s.in(x), s.out(out), scalar); });
//
// The recursive call sees only f32 (and f64/integer) tensors, so it runs the
// ordinary checks and kernel. Staged copies are contiguous, which costs a
// copy per operand: fine for a reference backend, not meant to be fast.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>

#include "kiln/core/tensor.h"

namespace kiln::cpu {

inline bool is_low_precision(DType t) { return t == DType::bf16 || t == DType::f16; }

// True if any defined tensor among `ts` is bf16 or f16.
bool any_low_precision(std::initializer_list<const Tensor*> ts);

class F32Staging {
 public:
  // An f32 copy of a bf16/f16 input; any other tensor (or undefined) as is.
  Tensor in(const Tensor& t) const;
  // A tensor for the op to write in place of output `t`: an f32 buffer if t
  // is bf16/f16 (holding t's values when `accumulate`, for ops that add into
  // their output), else t itself. The reference stays valid until finish().
  Tensor& out(const Tensor& t, bool accumulate = false);
  // Rounds every staged output back into its original tensor.
  void finish();

 private:
  struct Staged {
    Tensor original, staged;
  };
  // In place, not a deque (which allocates even empty: a decoding step
  // stages hundreds): references to elements survive the next out().
  static constexpr size_t kMaxOutputs = 8;
  std::array<Staged, kMaxOutputs> outputs_;
  size_t staged_ = 0;
};

// Contiguous bf16 <-> f32 (vectorised; round to nearest even), for kernels
// that convert a cache-sized block at a time instead of staging whole
// tensors: memory then sees 2 bytes per element each way, not 2 + 4 + 4.
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);

// dst = src when one is f32 and the other bf16/f16, both contiguous and of
// one shape (autocast's casts, staging): vectorised, over the pool. False,
// with nothing done, for any other pair.
bool convert_contiguous(const Tensor& src, Tensor& dst);

// A bf16/f16 tensor's storage as raw 16-bit values.
inline const uint16_t* bits16(const Tensor& t) { return static_cast<const uint16_t*>(t.data_ptr()); }
inline uint16_t* bits16(Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); }

// Runs `body` with a fresh staging area, then writes the outputs back.
template <typename Body>
void in_f32(Body&& body) {
  F32Staging staging;
  body(staging);
  staging.finish();
}

}  // namespace kiln::cpu
