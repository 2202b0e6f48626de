// A read-only file mapped copy-on-write: tensors that view it can still be
// written (training updates them in place), which copies only the pages
// touched. Safetensors and GGUF files are mapped so; the mapping lives as
// long as the last tensor that views it (Tensor::wrap's owner).
#pragma once
#include <cstddef>
#include <memory>

namespace kiln {

struct FileMapping {
  void* base = nullptr;
  size_t bytes = 0;
  ~FileMapping();
};

// `bytes` (> 0) of the open file `fd` mapped; nullptr when the system cannot
// map it (errno says why: a file system without mmap, say).
std::shared_ptr<FileMapping> map_copy_on_write(int fd, size_t bytes);

}  // namespace kiln
