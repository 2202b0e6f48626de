#include "kiln/io/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/io/file_mapping.h"

namespace kiln {

namespace {

// The row-major shape of ggml's dims (dims[0] fastest).
Shape kiln_shape(const std::vector<int64_t>& dims) { return Shape(dims.rbegin(), dims.rend()); }

// The last parsed header, and the file it was parsed from: its path, size,
// inode and modification time, and a hash of the header's bytes (a file
// rewritten within one tick of the clock keeps its time, and a new inode may
// reuse the number of the one it replaced).
struct ParsedHeaderCache {
  std::mutex mutex;
  std::string path;
  off_t size = -1;
  ino_t inode = 0;
  struct timespec modified = {};
  size_t header_hash = 0;
  std::shared_ptr<const GgufHeader> header;

  static size_t hash_of(const uint8_t* base, const GgufHeader& h) {
    return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(base), h.data_start));
  }
  std::shared_ptr<const GgufHeader> find(const std::string& p, const struct stat& st, const uint8_t* base) {
    std::lock_guard<std::mutex> lock(mutex);
    const bool same = header && p == path && st.st_size == size && st.st_ino == inode &&
                      st.st_mtim.tv_sec == modified.tv_sec && st.st_mtim.tv_nsec == modified.tv_nsec &&
                      hash_of(base, *header) == header_hash;
    return same ? header : nullptr;
  }
  void keep(const std::string& p, const struct stat& st, const uint8_t* base, std::shared_ptr<const GgufHeader> h) {
    std::lock_guard<std::mutex> lock(mutex);
    path = p;
    size = st.st_size;
    inode = st.st_ino;
    modified = st.st_mtim;
    header_hash = hash_of(base, *h);
    header = std::move(h);
  }
};
ParsedHeaderCache g_last_header;

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    KILN_FAIL("cannot open GGUF file ", path, ": ", std::generic_category().message(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    KILN_FAIL(path, " is not a regular file");
  }
  const size_t bytes = size_t(st.st_size);
  const auto mapping = bytes > 0 ? map_copy_on_write(fd, bytes) : nullptr;
  const int err = errno;
  ::close(fd);
  KILN_CHECK(bytes > 0, path, " is empty: not a GGUF file");
  KILN_CHECK(mapping, "cannot map ", path, ": ", std::generic_category().message(err));
  GgufFile f;
  f.path_ = path;
  f.base_ = static_cast<const uint8_t*>(mapping->base);
  f.header_ = g_last_header.find(path, st, f.base_);
  if (!f.header_) {
    try {
      f.header_ = std::make_shared<const GgufHeader>(parse_gguf(f.base_, bytes));
    } catch (const Error& e) {
      KILN_FAIL(path, ": ", e.what());
    }
    g_last_header.keep(path, st, f.base_, f.header_);
  }
  f.mapping_ = mapping;
  return f;
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const { return header_->find(name); }

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find(name);
  KILN_CHECK(t, path_, " holds no tensor '", name, "'");
  void* data = const_cast<uint8_t*>(base_ + header_->data_start + t->offset);  // (mapped copy-on-write)
  const Shape shape = kiln_shape(t->dims);
  switch (t->type) {
    case GgufType::F32: return Tensor::wrap(data, shape, DType::f32, mapping_);
    case GgufType::F16: return Tensor::wrap(data, shape, DType::f16, mapping_);
    case GgufType::BF16: return Tensor::wrap(data, shape, DType::bf16, mapping_);
    default: {
      const int64_t rows = shape_numel(shape) / t->dims[0];
      return Tensor::wrap(data, {rows, int64_t(t->bytes) / rows}, DType::u8, mapping_);
    }
  }
}

}  // namespace kiln
