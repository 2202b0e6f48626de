// The encoder architectures Kiln reads from GGUF, as llama.cpp names them,
// with their tensors' names in the checkpoint transformers (or the model's
// own code) would load: a row each. Shared by the config reader (which the
// fuzzer builds without a tensor library) and the weight reader.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace kiln::models {

struct GgufEncoderArch {
  std::string arch;                                              // general.architecture
  std::vector<std::pair<std::string, std::string>> names;        // whole-model tensors
  std::string layers;                                            // "encoder.layer": where layer N's are
  std::vector<std::pair<std::string, std::string>> layer_names;  // blk.N.<gguf> -> <layers>.N.<hf>
};

// The row of `arch`, or null.
const GgufEncoderArch* gguf_encoder_arch(const std::string& arch);
// The checkpoint's name of a tensor of the file, or "" for none.
std::string gguf_encoder_name(const GgufEncoderArch& a, const std::string& name);

}  // namespace kiln::models
