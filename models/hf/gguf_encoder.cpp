#include "models/hf/gguf_encoder.h"

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf_quants.h"
#include "models/hf/gguf_encoder_names.h"

namespace kiln::models {

std::map<std::string, Tensor> gguf_encoder_weights(const GgufFile& file) {
  const std::string arch = gguf_encoder_arch_name(file.metadata());
  const GgufEncoderArch* row = gguf_encoder_arch(arch);
  KILN_CHECK(row, "GGUF: ", arch, " is not an encoder Kiln reads");
  std::map<std::string, Tensor> weights;
  for (const GgufTensorInfo& t : file.header().tensors) {
    const std::string name = gguf_encoder_name(*row, t.name);
    KILN_CHECK(!name.empty(), "GGUF: tensor '", t.name, "' has no place in a ", arch, " encoder");
    if (t.type == GgufType::F32) {
      weights.emplace(name, file.tensor(t.name));
      continue;
    }
    if (t.type == GgufType::F16 || t.type == GgufType::BF16) {  // the converter mixes them with F32 norms
      weights.emplace(name, to_dtype(file.tensor(t.name), DType::f32));
      continue;
    }
    Tensor out = Tensor::empty(Shape(t.dims.rbegin(), t.dims.rend()), DType::f32);
    gguf_dequantize(t.type, file.tensor(t.name).data<uint8_t>(), out.numel(), out.data<float>());
    weights.emplace(name, std::move(out));
  }
  return weights;
}

}  // namespace kiln::models
