// GGUF (llama.cpp's file format), versions 2 and 3: "GGUF", the version, the
// tensor and key-value counts, the key-values (typed scalars, strings and
// arrays), then each tensor's name, dims (ggml's order: the fastest first),
// type and offset, then the tensors' data from the first multiple of
// general.alignment (32 by default), each at an aligned offset.
//
// This parses those bytes alone (no file, no tensors: the libFuzzer target
// tests/fuzz/gguf_fuzzer.cpp drives it), checking every count, length and
// offset against what remains before it allocates or reads: a truncated or
// hostile file is a kiln::Error naming what is wrong, never a crash or an
// allocation larger than the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln {

// ggml's tensor types (ggml.h's enum ggml_type), by their ids in the file.
enum class GgufType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ4_NL = 20, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct GgufTypeInfo {
  const char* name;
  int64_t block_elements;  // values per block (1 for plain numbers, 32, or 256 for the K-quants)
  int64_t block_bytes;     // bytes per block
};
// The layout of a type id; an id Kiln does not read (the IQ types below 4
// bits, the ternary and FP4 ones, ids llama.cpp retired) is an error naming it.
const GgufTypeInfo& gguf_type_info(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml's order: dims[0] varies fastest (a row); a Kiln shape is them reversed
  GgufType type = GgufType::F32;
  uint64_t offset = 0;        // from the start of the data section
  uint64_t bytes = 0;
  uint32_t file = 0;  // which of a split model's files holds it (GgufFile); 0 in a file's own header
};

struct GgufHeader {
  uint32_t version = 0;
  // Key -> value: unsigned and signed integers, floats, bools, strings and
  // arrays (of any of those, arrays too) as JSON values; strings are the
  // file's bytes.
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<GgufTensorInfo> tensors;
  uint64_t alignment = 32;
  uint64_t data_start = 0;  // where the data section begins, from the start of the file

  const GgufTensorInfo* find(const std::string& name) const {  // null when the file holds none
    for (const GgufTensorInfo& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

// Parses a whole file's bytes (`size` of them, the data section included, so
// each tensor is checked to lie inside).
GgufHeader parse_gguf(const uint8_t* data, size_t size);

}  // namespace kiln
