// A GGUF file (kiln/io/gguf_parse.h) mapped into memory: its metadata, and
// its tensors as views of the mapping (no copy). F32, F16 and BF16 tensors
// come as Kiln tensors of the row-major shape (ggml's dims reversed); a
// quantized tensor's blocks come as its raw bytes (u8 [rows, bytes per row])
// for the kernels of its type.
//
// A model that llama.cpp's gguf-split (or its converter's --split-max-size)
// wrote as several files, PREFIX-00001-of-0000N.gguf onwards, each with
// split.no and split.count, opens from its first file as llama.cpp's does:
// the others are found beside it by their names, their tensors join the
// first's, and the first's metadata is the model's. (Hugging Face's larger
// GGUF downloads come so: a 32B model's Q4_K_M as two to five files.)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/io/gguf_parse.h"

namespace kiln {

class GgufFile {
 public:
  // Maps `path` (and a split model's other files) read-only and parses it; a
  // bad file is a kiln::Error naming the path and what is wrong. Loading a
  // model opens its file several times (config, weights, tokenizer, chat
  // template), and a 128K-token vocabulary's metadata takes 0.1-0.3 s to
  // parse, so the last model's parsed header is kept and reused while each of
  // its files keeps its size, inode, modification time and header bytes
  // (hashed) (the mappings are made anew each time).
  static GgufFile open(const std::string& path);
  const std::string& path() const { return path_; }      // the first file's
  const GgufHeader& header() const { return *header_; }  // every file's tensors (GgufTensorInfo::file)
  const nlohmann::json& metadata() const { return header_->metadata; }
  const GgufTensorInfo* find(const std::string& name) const;
  // The tensor `name`: F32/F16/BF16 as its values, any other type as its bytes.
  Tensor tensor(const std::string& name) const;

 private:
  struct Part {
    std::shared_ptr<void> mapping;  // the whole file, mapped; tensors keep it alive
    const uint8_t* data = nullptr;  // its data section
  };
  std::string path_;
  std::shared_ptr<const GgufHeader> header_;
  std::vector<Part> parts_;  // a split model's files, in order; one otherwise
};

}  // namespace kiln
