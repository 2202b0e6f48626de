// safetensors: the weight format shared with PyTorch / Hugging Face.
//
// Layout (little-endian): an 8-byte unsigned header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the data buffer. Offsets are
// relative to the buffer start; the tensors tile the buffer exactly.
//
// We write the bytes the reference implementation (safetensors 0.8) writes:
// compact JSON with __metadata__ first, tensors ordered by dtype (widest
// first, so each starts aligned to its element size) then by name, and the
// header padded with spaces. We read any valid file, and reject invalid ones
// with a message naming the file and the defect (see docs/CHECKPOINTS.md).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes the tensors atomically (see atomic_file.h). Tensors must be on the
// CPU; any strides are fine (views are written in logical row-major order).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // contiguous CPU tensors
  std::map<std::string, std::string> metadata;
};

// Reads and validates a whole file; throws kiln::Error naming `path` on any defect.
SafetensorsFile load_safetensors(const std::string& path);
// The same checks, but the tensors view the file mapped into memory
// (copy-on-write) instead of copies: loading costs the time to page in what
// is used, and no second copy of the weights exists.
SafetensorsFile map_safetensors(const std::string& path);

// The header JSON (unpadded) that save_safetensors writes for these tensors.
// Exposed so tests can check the exact bytes against the reference layout.
std::string safetensors_header_json(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata);

// Copies a CPU tensor of any strides into `dst` (t.nbytes() bytes) in
// row-major order. Needs no backend, so io depends only on core.
void copy_tensor_bytes(const Tensor& t, void* dst);

}  // namespace kiln
