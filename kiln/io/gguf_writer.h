// Writes a GGUF v3 file (the layout kiln/io/gguf_parse.h reads): metadata
// from JSON values, typed as llama.cpp's converter types them (integers as
// u32, or i32 where negative; floats as f32; bools; strings; arrays of one of
// those), then each tensor's bytes at an offset aligned to 32. The file
// appears whole or not at all (kiln/io/atomic_file.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/io/gguf_parse.h"

namespace kiln {

struct GgufTensorOut {
  std::string name;
  std::vector<int64_t> dims;   // ggml's order: a row first (a Kiln shape reversed)
  GgufType type = GgufType::F32;
  std::vector<uint8_t> bytes;  // its blocks, as the type lays them out
};

void write_gguf(const std::string& path, const nlohmann::json& metadata, const std::vector<GgufTensorOut>& tensors);

// ggml's Q8_0 of `count` values (a multiple of 32): per block of 32, the f16
// scale max|x| / 127 and each value divided by it, rounded (quantize_row_q8_0_ref).
std::vector<uint8_t> quantize_q8_0(const float* values, int64_t count);

}  // namespace kiln
