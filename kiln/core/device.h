// Where a tensor lives: the CPU, or CUDA device N.
#pragma once
#include <string>

namespace kiln {

// meta: shapes and byte counts without data, for planning (kiln/meta).
enum class DeviceType : uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  static Device meta(int i = 0) { return {DeviceType::meta, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;                   // "cpu", "cuda:0"
  // "cpu", "cuda", "cuda:1"; "cpu:N" (N >= 1) is a simulated device backed by
  // host memory with its own allocator (kiln/core/allocator.h).
  static Device parse(const std::string& s);
};

}  // namespace kiln
