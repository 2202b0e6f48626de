// A GGUF file (kiln/io/gguf_parse.h) mapped into memory: its metadata, and
// its tensors as views of the mapping (no copy). F32, F16 and BF16 tensors
// come as Kiln tensors of the row-major shape (ggml's dims reversed); a
// quantized tensor's blocks come as its raw bytes (u8 [rows, bytes per row])
// for the kernels of its type.
#pragma once
#include <memory>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/io/gguf_parse.h"

namespace kiln {

class GgufFile {
 public:
  // Maps `path` read-only and parses it; a bad file is a kiln::Error naming
  // the path and what is wrong. Loading a model opens its file several times
  // (config, weights, tokenizer, chat template), and a 128K-token
  // vocabulary's metadata takes 0.1-0.3 s to parse, so the last file's parsed
  // header is kept and reused while its size, inode, modification time and
  // header bytes (hashed) stay the same (the mapping is made anew each time).
  static GgufFile open(const std::string& path);
  const std::string& path() const { return path_; }
  const GgufHeader& header() const { return *header_; }
  const nlohmann::json& metadata() const { return header_->metadata; }
  const GgufTensorInfo* find(const std::string& name) const;
  // The tensor `name`: F32/F16/BF16 as its values, any other type as its bytes.
  Tensor tensor(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<const GgufHeader> header_;
  std::shared_ptr<void> mapping_;  // the whole file, mapped; tensors keep it alive
  const uint8_t* base_ = nullptr;
};

}  // namespace kiln
