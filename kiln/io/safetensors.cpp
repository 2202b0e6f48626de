// Writing safetensors files; reading lives in safetensors_read.cpp.
#include "kiln/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/io/atomic_file.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data and Kiln copies it verbatim; a big-endian host needs byte swaps");

namespace {

// Calls fn(first_element, count, stride_in_bytes) for every innermost row of
// `t` in row-major order, so a strided view is visited in logical order.
template <typename Fn>
void for_each_row(const Tensor& t, Fn&& fn) {
  if (t.numel() == 0) return;
  const char* base = static_cast<const char*>(t.data_ptr());
  const int64_t es = int64_t(t.element_size());
  const int rank = t.dim();
  if (rank == 0) {
    fn(base, int64_t(1), es);
    return;
  }
  const Shape& shape = t.shape();
  const Strides& strides = t.strides();
  const int64_t inner = shape[rank - 1];
  const int64_t rows = t.numel() / inner;
  std::vector<int64_t> index(size_t(rank - 1), 0);
  int64_t offset = 0;  // in elements, of the current row's first element
  for (int64_t r = 0; r < rows; ++r) {
    fn(base + offset * es, inner, strides[rank - 1] * es);
    // Odometer increment over the outer dims, keeping `offset` in step.
    for (int d = rank - 2; d >= 0; --d) {
      offset += strides[d];
      if (++index[d] < shape[d]) break;
      offset -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

template <size_t N>
void gather_elements(char* dst, const char* src, int64_t n, int64_t stride_bytes) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * int64_t(N), src + i * stride_bytes, N);
}

// Copies `n` elements `stride_bytes` apart into a dense run at `dst`.
void copy_row(char* dst, const char* src, int64_t n, int64_t stride_bytes, size_t es) {
  if (stride_bytes == int64_t(es) || n == 1) {
    std::memcpy(dst, src, size_t(n) * es);
    return;
  }
  switch (es) {  // fixed-size memcpy compiles to a single load/store
    case 1: gather_elements<1>(dst, src, n, stride_bytes); break;
    case 2: gather_elements<2>(dst, src, n, stride_bytes); break;
    case 4: gather_elements<4>(dst, src, n, stride_bytes); break;
    case 8: gather_elements<8>(dst, src, n, stride_bytes); break;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * int64_t(es), src + i * stride_bytes, es);
  }
}

// The reference writer's dtype order (its Dtype enum, which is sorted by
// alignment): U8 < F16 < BF16 < I32 < F32 < F64 < I64.
int reference_rank(DType t) {
  switch (t) {
    case DType::u8: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 2;
    case DType::i32: return 3;
    case DType::f32: return 4;
    case DType::f64: return 5;
    case DType::i64: return 6;
  }
  return 0;
}

// The reference writer's tensor order: highest rank first, then by name. As
// the rank follows alignment and the header is padded to 8 bytes, every
// tensor starts aligned to its element size, so a memory-mapped reader can
// use the data in place. Matching it also makes our files byte-identical.
std::vector<size_t> write_order(const NamedTensors& tensors) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int ra = reference_rank(tensors[a].second.dtype()), rb = reference_rank(tensors[b].second.dtype());
    if (ra != rb) return ra > rb;
    return tensors[a].first < tensors[b].first;
  });
  return order;
}

void check_savable(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(!name.empty(), "save_safetensors ", path, ": a tensor has an empty name");
    KILN_CHECK(name != "__metadata__", "save_safetensors ", path,
               ": '__metadata__' is reserved by the format and cannot name a tensor");
    KILN_CHECK(seen.insert(name).second, "save_safetensors ", path, ": tensor name '", name, "' appears twice");
    KILN_CHECK(t.defined(), "save_safetensors ", path, ": tensor '", name, "' is undefined");
    KILN_CHECK(t.device().is_cpu(), "save_safetensors ", path, ": tensor '", name, "' is on ", t.device().str(),
               "; copy it to the CPU first");
  }
}

}  // namespace

void copy_tensor_bytes(const Tensor& t, void* dst) {
  KILN_CHECK(t.device().is_cpu(), "copy_tensor_bytes: tensor is on ", t.device().str(), ", expected the CPU");
  char* out = static_cast<char*>(dst);
  const size_t es = t.element_size();
  for_each_row(t, [&](const char* src, int64_t n, int64_t stride_bytes) {
    copy_row(out, src, n, stride_bytes, es);
    out += size_t(n) * es;
  });
}

std::string safetensors_header_json(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order, matching the reference key order
  // (__metadata__ first; dtype, shape, data_offsets within a tensor).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : write_order(tensors)) {
    const Tensor& t = tensors[i].second;
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = dtype_safetensors_name(t.dtype());
    info["shape"] = t.shape();
    info["data_offsets"] = {offset, offset + t.nbytes()};
    header[tensors[i].first] = std::move(info);
    offset += t.nbytes();
  }
  try {
    return header.dump();
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL("safetensors header: a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_savable(path, tensors);
  std::string header = safetensors_header_json(tensors, metadata);
  header.append((8 - header.size() % 8) % 8, ' ');  // the reference pads with spaces to 8 bytes

  AtomicFileWriter out(path);
  const uint64_t header_len = header.size();
  out.write(&header_len, 8);  // little-endian (static_assert above)
  out.write(header);

  // Non-contiguous tensors are gathered row by row through a staging buffer,
  // so saving never needs a second full copy of the weights in memory.
  constexpr size_t kStagingBytes = size_t(1) << 20;
  std::vector<char> staging(kStagingBytes);
  size_t used = 0;
  auto flush = [&] {
    out.write(staging.data(), used);
    used = 0;
  };
  for (size_t i : write_order(tensors)) {
    const Tensor& t = tensors[i].second;
    if (t.numel() == 0) continue;
    if (t.is_contiguous()) {
      flush();
      out.write(t.data_ptr(), t.nbytes());
      continue;
    }
    const size_t es = t.element_size();
    for_each_row(t, [&](const char* src, int64_t n, int64_t stride_bytes) {
      size_t row_bytes = size_t(n) * es;
      if (used + row_bytes > staging.size()) flush();
      if (row_bytes > staging.size()) staging.resize(row_bytes);
      copy_row(staging.data() + used, src, n, stride_bytes, es);
      used += row_bytes;
    });
  }
  flush();
  out.commit();
}

}  // namespace kiln
