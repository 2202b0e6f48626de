#include "kiln/io/gguf_writer.h"

#include <cmath>
#include <cstring>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"

namespace kiln {

namespace {

constexpr uint64_t kAlignment = 32;
// GGUF's value types (gguf.h's enum gguf_type).
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

class Bytes {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void text(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void pad() { out_.resize((out_.size() + kAlignment - 1) / kAlignment * kAlignment, 0); }
  std::vector<uint8_t>& data() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

uint32_t type_of(const nlohmann::json& v, const std::string& key) {
  if (v.is_boolean()) return kBool;
  if (v.is_string()) return kString;
  if (v.is_number_float()) return kF32;
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    KILN_CHECK(v.get<uint64_t>() <= UINT32_MAX, "GGUF: key '", key, "' holds ", v.dump(), ", past a u32");
    return kU32;
  }
  if (v.is_number_integer()) return kI32;
  KILN_CHECK(v.is_array(), "GGUF: key '", key, "' holds ", v.type_name(), ", which GGUF has no type for");
  return kArray;
}

void put_value(Bytes& b, const nlohmann::json& v, uint32_t type) {
  switch (type) {
    case kBool: return b.put<uint8_t>(v.get<bool>() ? 1 : 0);
    case kString: return b.text(v.get<std::string>());
    case kF32: return b.put<float>(v.get<float>());
    case kU32: return b.put<uint32_t>(v.get<uint32_t>());
    case kI32: return b.put<int32_t>(v.get<int32_t>());
  }
}

void put_key_value(Bytes& b, const std::string& key, const nlohmann::json& v) {
  b.text(key);
  const uint32_t type = type_of(v, key);
  b.put<uint32_t>(type);
  if (type != kArray) return put_value(b, v, type);
  // An array's elements share one type: integers as i32 (llama.cpp reads token types so), floats if any is one.
  auto numeric = [](uint32_t t) { return t == kU32 || t == kI32 || t == kF32; };
  uint32_t element = v.empty() ? kI32 : type_of(v[0], key);
  if (element == kU32) element = kI32;
  for (const auto& e : v) {
    const uint32_t t = type_of(e, key);
    KILN_CHECK(t != kArray && (t == element || (numeric(t) && numeric(element))), "GGUF: key '", key,
               "' mixes types in one array");
    if (t == kF32) element = kF32;
  }
  b.put<uint32_t>(element);
  b.put<uint64_t>(v.size());
  for (const auto& e : v) put_value(b, e, element);
}

}  // namespace

void write_gguf(const std::string& path, const nlohmann::json& metadata, const std::vector<GgufTensorOut>& tensors) {
  Bytes head;
  head.put<uint32_t>(0x46554747);  // "GGUF"
  head.put<uint32_t>(3);
  head.put<uint64_t>(tensors.size());
  head.put<uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata.items()) put_key_value(head, key, value);
  uint64_t offset = 0;
  for (const GgufTensorOut& t : tensors) {
    const GgufTypeInfo& info = gguf_type_info(uint32_t(t.type));
    int64_t count = 1;
    for (int64_t d : t.dims) count *= d;
    KILN_CHECK(!t.dims.empty() && t.dims[0] % info.block_elements == 0 &&
                   uint64_t(count / info.block_elements * info.block_bytes) == t.bytes.size(),
               "GGUF: tensor '", t.name, "' holds ", t.bytes.size(), " bytes, not a ", info.name, " tensor of its dims");
    head.text(t.name);
    head.put<uint32_t>(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) head.put<uint64_t>(uint64_t(d));
    head.put<uint32_t>(uint32_t(t.type));
    head.put<uint64_t>(offset);
    offset += (t.bytes.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  head.pad();
  AtomicFileWriter out(path);
  out.write(head.data().data(), head.data().size());
  static const uint8_t zeros[kAlignment] = {};
  for (const GgufTensorOut& t : tensors) {
    out.write(t.bytes.data(), t.bytes.size());
    out.write(zeros, (kAlignment - t.bytes.size() % kAlignment) % kAlignment);
  }
  out.commit();
}

std::vector<uint8_t> quantize_q8_0(const float* values, int64_t count) {
  KILN_CHECK(count % 32 == 0, "Q8_0 quantizes blocks of 32 values; got ", count);
  std::vector<uint8_t> out(size_t(count / 32 * 34));
  for (int64_t b = 0; b < count / 32; ++b) {
    const float* x = values + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[i]));
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    uint8_t* block = out.data() + b * 34;
    const uint16_t half = float_to_f16(d);
    std::memcpy(block, &half, 2);
    for (int i = 0; i < 32; ++i) block[2 + i] = uint8_t(int8_t(std::lround(x[i] * id)));
  }
  return out;
}

}  // namespace kiln
