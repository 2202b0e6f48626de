#include "kiln/io/file_mapping.h"

#include <sys/mman.h>

namespace kiln {

FileMapping::~FileMapping() {
  if (base) ::munmap(base, bytes);
}

std::shared_ptr<FileMapping> map_copy_on_write(int fd, size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) return nullptr;
  auto mapping = std::make_shared<FileMapping>();
  mapping->base = base;
  mapping->bytes = bytes;
  return mapping;
}

}  // namespace kiln
