#include "kiln/io/gguf_parse.h"

#include <cstring>
#include <map>
#include <set>

#include "kiln/core/error.h"

namespace kiln {

namespace {

// Metadata value types (gguf.h's enum gguf_type).
enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};
constexpr int kMaxArrayDepth = 4;  // arrays of arrays: llama.cpp writes none deeper than two
constexpr uint32_t kMaxDims = 4;   // GGML_MAX_DIMS
// Counts no real file comes near (a vocabulary's ~260K tokens, ~1,000 tensors
// a layer), so a count within the file's bytes cannot still make the parsed
// values (16 bytes or more each) take many times the file's size.
constexpr uint64_t kMaxArrayLength = uint64_t(1) << 24, kMaxEntries = uint64_t(1) << 20;

// Reads little-endian values off the bytes, every read checked against what remains.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t at() const { return at_; }
  size_t left() const { return size_ - at_; }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + at_), size_t(n));
    at_ += size_t(n);
    return s;
  }
  void need(uint64_t n, const char* what) const {
    KILN_CHECK(n <= left(), "GGUF: the file ends inside ", what, " (", n, " bytes needed at byte ", at_, ", ", left(),
               " left): a truncated or damaged file");
  }

 private:
  const uint8_t* data_;
  size_t size_, at_ = 0;
};

// The fewest bytes one value of a type takes in the file (so a count can be
// checked against what remains before anything is allocated).
uint64_t smallest_value(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
    case kArray: return 12;
    default: KILN_FAIL("GGUF: metadata value type ", type, " is not one GGUF defines (0-12)");
  }
}

nlohmann::json read_value(Cursor& c, uint32_t type, int depth, const std::string& key) {
  switch (type) {
    case kU8: return c.read<uint8_t>("a value");
    case kI8: return c.read<int8_t>("a value");
    case kU16: return c.read<uint16_t>("a value");
    case kI16: return c.read<int16_t>("a value");
    case kU32: return c.read<uint32_t>("a value");
    case kI32: return c.read<int32_t>("a value");
    case kF32: return c.read<float>("a value");
    case kU64: return c.read<uint64_t>("a value");
    case kI64: return c.read<int64_t>("a value");
    case kF64: return c.read<double>("a value");
    case kBool: {
      const uint8_t b = c.read<uint8_t>("a value");
      KILN_CHECK(b <= 1, "GGUF: key '", key, "' holds a bool of ", int(b), " (0 or 1 expected)");
      return b == 1;
    }
    case kString: return c.string("a string");
    case kArray: {
      KILN_CHECK(depth < kMaxArrayDepth, "GGUF: key '", key, "' nests arrays deeper than ", kMaxArrayDepth);
      const uint32_t element = c.read<uint32_t>("an array's type");
      const uint64_t count = c.read<uint64_t>("an array's length");
      KILN_CHECK(count <= c.left() / smallest_value(element) && count <= kMaxArrayLength, "GGUF: key '", key,
                 "' claims ", count, " elements, more than the ", c.left(), " bytes left could hold (or over ",
                 kMaxArrayLength, ")");
      nlohmann::json out = nlohmann::json::array();
      for (uint64_t i = 0; i < count; ++i) out.push_back(read_value(c, element, depth + 1, key));
      return out;
    }
    default: KILN_FAIL("GGUF: key '", key, "' has value type ", type, ", not one GGUF defines (0-12)");
  }
}

}  // namespace

const GgufTypeInfo& gguf_type_info(uint32_t type) {
  static const std::map<uint32_t, GgufTypeInfo> types = {
      {0, {"F32", 1, 4}},        {1, {"F16", 1, 2}},        {2, {"Q4_0", 32, 18}},    {3, {"Q4_1", 32, 20}},
      {6, {"Q5_0", 32, 22}},     {7, {"Q5_1", 32, 24}},     {8, {"Q8_0", 32, 34}},    {9, {"Q8_1", 32, 36}},
      {10, {"Q2_K", 256, 84}},   {11, {"Q3_K", 256, 110}},  {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}},  {15, {"Q8_K", 256, 292}},  {20, {"IQ4_NL", 32, 18}}, {23, {"IQ4_XS", 256, 136}},
      {24, {"I8", 1, 1}},        {25, {"I16", 1, 2}},       {26, {"I32", 1, 4}},      {27, {"I64", 1, 8}},
      {28, {"F64", 1, 8}},       {30, {"BF16", 1, 2}}};
  // ggml's types Kiln does not read, named in the error.
  static const std::map<uint32_t, const char*> unread = {
      {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {21, "IQ3_S"}, {22, "IQ2_S"}, {29, "IQ1_M"},
      {34, "TQ1_0"},   {35, "TQ2_0"},  {39, "MXFP4"},   {40, "NVFP4"}, {41, "Q1_0"},  {42, "Q2_0"}};
  const auto it = types.find(type);
  const auto unread_name = unread.find(type);
  KILN_CHECK(it != types.end(), "GGUF: tensor type ", type,
             unread_name != unread.end() ? std::string(" (") + unread_name->second + ")" : std::string(),
             " is not one Kiln reads (it reads F32, F16, BF16, "
             "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, the K-quants Q2_K-Q8_K, IQ4_NL, IQ4_XS and the integers; not the "
             "IQ types below 4 bits, nor the ternary or FP4 ones): requantize the file, e.g. llama-quantize FILE OUT "
             "Q4_K_M, or pick a Q*_K or IQ4_XS download");
  return it->second;
}

GgufHeader parse_gguf(const uint8_t* data, size_t size) {
  Cursor c(data, size);
  KILN_CHECK(size >= 4 && std::memcmp(data, "GGUF", 4) == 0,
             "GGUF: the file does not start with \"GGUF\": not a GGUF file");
  c.read<uint32_t>("the magic");
  GgufHeader h;
  h.version = c.read<uint32_t>("the version");
  KILN_CHECK(h.version == 2 || h.version == 3, "GGUF: version ", h.version,
             " (Kiln reads versions 2 and 3; convert older files with a current llama.cpp)");
  const uint64_t tensors = c.read<uint64_t>("the tensor count");
  const uint64_t keys = c.read<uint64_t>("the key count");
  // A key-value takes at least 13 bytes (a length, a type, a byte); a tensor info at least 24.
  KILN_CHECK(keys <= c.left() / 13 && keys <= kMaxEntries, "GGUF: ", keys,
             " key-values claimed, more than the file could hold");
  KILN_CHECK(tensors <= c.left() / 24 && tensors <= kMaxEntries, "GGUF: ", tensors,
             " tensors claimed, more than the file could hold");
  for (uint64_t i = 0; i < keys; ++i) {
    std::string key = c.string("a key");
    const uint32_t type = c.read<uint32_t>("a value's type");
    KILN_CHECK(!h.metadata.contains(key), "GGUF: key '", key, "' appears twice");
    h.metadata[key] = read_value(c, type, 0, key);
  }
  if (h.metadata.contains("general.alignment")) {
    const nlohmann::json& a = h.metadata["general.alignment"];
    KILN_CHECK(a.is_number_unsigned() && a.get<uint64_t>() > 0 && a.get<uint64_t>() <= (1u << 20) &&
                   (a.get<uint64_t>() & (a.get<uint64_t>() - 1)) == 0,
               "GGUF: general.alignment is ", a.dump(), "; expected a power of two up to 1 MiB");
    h.alignment = a.get<uint64_t>();
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string("a tensor's name");
    KILN_CHECK(names.insert(t.name).second, "GGUF: tensor '", t.name, "' appears twice");
    const uint32_t dims = c.read<uint32_t>("a tensor's dims");
    KILN_CHECK(dims >= 1 && dims <= kMaxDims, "GGUF: tensor '", t.name, "' has ", dims, " dims (1 to 4)");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      const uint64_t n = c.read<uint64_t>("a tensor's dims");
      KILN_CHECK(n >= 1 && n <= (uint64_t(1) << 40) && elements <= (uint64_t(1) << 50) / n, "GGUF: tensor '",
                 t.name, "' has a dim of ", n, ", or too many elements in all");
      elements *= n;
      t.dims.push_back(int64_t(n));
    }
    const uint32_t type = c.read<uint32_t>("a tensor's type");
    const GgufTypeInfo& info = gguf_type_info(type);
    t.type = GgufType(type);
    KILN_CHECK(t.dims[0] % info.block_elements == 0, "GGUF: tensor '", t.name, "' has rows of ", t.dims[0],
               " values, not a multiple of ", info.name, "'s blocks of ", info.block_elements);
    t.bytes = elements / uint64_t(info.block_elements) * uint64_t(info.block_bytes);
    t.offset = c.read<uint64_t>("a tensor's offset");
    KILN_CHECK(t.offset % h.alignment == 0, "GGUF: tensor '", t.name, "' starts at ", t.offset,
               ", not a multiple of the alignment ", h.alignment);
    h.tensors.push_back(std::move(t));
  }
  h.data_start = (uint64_t(c.at()) + h.alignment - 1) / h.alignment * h.alignment;
  for (const GgufTensorInfo& t : h.tensors)
    KILN_CHECK(h.data_start <= size && t.offset <= size - h.data_start && t.bytes <= size - h.data_start - t.offset,
               "GGUF: tensor '", t.name, "' (", t.bytes, " bytes at ", t.offset, " in the data) lies past the file's end (",
               size, " bytes): a truncated file");
  return h;
}

}  // namespace kiln
