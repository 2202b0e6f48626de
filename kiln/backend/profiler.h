// Kiln's own per-op timer: where a training step's time goes, by backend
// op, without an external profiler. While a Profiler is enabled,
// backend_for() hands out a wrapper around each backend that times every
// call (synchronising the device after it, so GPU time lands on the op that
// launched it) and counts calls. What a step spends outside the backend ops
// (autograd bookkeeping, allocation, the data loader, the optimizer's host
// code) is the step time minus the ops' sum: the framework overhead.
//
//   kiln::Profiler::enable();
//   ... train ...
//   std::puts(kiln::Profiler::report(step_seconds_total).c_str());
//
// Off by default; `kiln train --profile` turns it on. Timing each op adds a
// clock read per call, and a device synchronisation on CUDA.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "kiln/backend/backend.h"

namespace kiln {

struct OpTime {
  int64_t calls = 0;
  double seconds = 0;
};

class Profiler {
 public:
  // by_shape: each op's time also split by its operands' shapes, dtypes
  // and layouts (`kiln train --profile-shapes`), to find which product or
  // cast a step spends its time in.
  static void enable(bool on = true, bool by_shape = false);
  static bool enabled();
  static void reset();
  // By "device:op" (e.g. "cpu:matmul"), or with by_shape
  // "cpu:matmul [2048, 128] bf16, [128, 512]^T bf16, [2048, 512] bf16".
  static std::map<std::string, OpTime> snapshot();
  // A table of ops by time, with the framework overhead against
  // `total_seconds` (the wall time the profiled work took).
  static std::string report(double total_seconds);
  // Records one call (used by the wrapper; thread-safe).
  static void record(const std::string& key, double seconds);
};

// The timing wrapper around `inner` (kiln/backend/registry.cpp uses it).
Backend& profiling_backend(Backend& inner);

}  // namespace kiln
