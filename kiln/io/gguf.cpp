#include "kiln/io/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>

#include "kiln/core/error.h"
#include "kiln/io/file_mapping.h"

namespace kiln {

namespace {

// The row-major shape of ggml's dims (dims[0] fastest).
Shape kiln_shape(const std::vector<int64_t>& dims) { return Shape(dims.rbegin(), dims.rend()); }

// The last parsed header, and the file it was parsed from.
struct ParsedHeaderCache {
  std::mutex mutex;
  std::string path;
  off_t size = -1;
  struct timespec modified = {};
  std::shared_ptr<const GgufHeader> header;

  std::shared_ptr<const GgufHeader> find(const std::string& p, const struct stat& st) {
    std::lock_guard<std::mutex> lock(mutex);
    const bool same = header && p == path && st.st_size == size && st.st_mtim.tv_sec == modified.tv_sec &&
                      st.st_mtim.tv_nsec == modified.tv_nsec;
    return same ? header : nullptr;
  }
  void keep(const std::string& p, const struct stat& st, std::shared_ptr<const GgufHeader> h) {
    std::lock_guard<std::mutex> lock(mutex);
    path = p;
    size = st.st_size;
    modified = st.st_mtim;
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
  f.header_ = g_last_header.find(path, st);
  if (!f.header_) {
    try {
      f.header_ = std::make_shared<const GgufHeader>(parse_gguf(f.base_, bytes));
    } catch (const Error& e) {
      KILN_FAIL(path, ": ", e.what());
    }
    g_last_header.keep(path, st, f.header_);
  }
  f.mapping_ = mapping;
  return f;
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  for (const GgufTensorInfo& t : header_->tensors)
    if (t.name == name) return &t;
  return nullptr;
}

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
