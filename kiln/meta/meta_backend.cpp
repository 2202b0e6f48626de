#include "kiln/meta/meta_backend.h"

#include <atomic>
#include <map>
#include <mutex>

#include "kiln/cpu/cpu_backend.h"

namespace kiln::meta {

void MetaBackend::copy(const Tensor& src, Tensor& dst) {
  KILN_CHECK(dst.device().type == DeviceType::meta, "a meta tensor has no values to copy to ", dst.device().str(),
             ": meta tensors are for planning (shapes and bytes only)");
}

namespace {

void touch_scratch(const Tensor& x, const Tensor& weight, const Conv2dArgs& args, const cpu::ConvScratchPass& pass) {
  MemoryCategoryScope scope(MemoryCategory::workspace);
  std::vector<Tensor> scratch;
  for (int64_t n : cpu::conv2d_scratch_elements(x.shape(), weight.shape(), args, x.dtype(), pass))
    scratch.push_back(Tensor::empty({n}, x.dtype(), x.device()));
}

}  // namespace

void MetaBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor&,
                         const Conv2dArgs& args) {
  cpu::ConvScratchPass pass;
  pass.bias = bias.defined();
  touch_scratch(x, weight, args, pass);
}

void MetaBackend::conv2d_backward(const Tensor&, const Tensor& x, const Tensor& weight, Tensor& dx, Tensor& dweight,
                                  Tensor&, const Conv2dArgs& args) {
  cpu::ConvScratchPass pass;
  pass.backward = true;
  pass.dx = dx.defined();
  pass.dweight = dweight.defined();
  touch_scratch(x, weight, args, pass);
}

namespace {

// Hands out distinct, aligned, never-dereferenced addresses and holds no
// memory: the counts (kept by Allocator) are the point.
class MetaAllocator final : public Allocator {
 public:
  explicit MetaAllocator(int index) : index_(index) {}
  std::string device_name() const override { return index_ == 0 ? "meta" : "meta:" + std::to_string(index_); }

 protected:
  void* raw_allocate(size_t bytes) override {
    const uintptr_t at = next_.fetch_add((std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    return reinterpret_cast<void*>(at);
  }
  void raw_deallocate(void*, size_t) override {}

 private:
  int index_;
  std::atomic<uintptr_t> next_{uintptr_t(1) << 44};
};

Allocator* meta_allocator_factory(int index) {
  static std::mutex mutex;
  static std::map<int, MetaAllocator*> allocators;  // never destroyed, as the CPU's
  std::lock_guard<std::mutex> lock(mutex);
  MetaAllocator*& a = allocators[index];
  if (!a) a = new MetaAllocator(index);
  return a;
}

}  // namespace

}  // namespace kiln::meta

namespace kiln {

Backend* meta_backend_instance() {
  static meta::MetaBackend backend;
  static const bool registered = [] {
    register_allocator(DeviceType::meta, &meta::meta_allocator_factory);
    return true;
  }();
  (void)registered;
  return &backend;
}

}  // namespace kiln
