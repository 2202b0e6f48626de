#include "apps/plan/serving.h"

#include <set>
#include <sstream>

#include "kiln/core/units.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "models/hf/families.h"
#include "models/hf/gguf_model.h"

namespace kiln::plan {

ServingMemory serving_memory(const nlohmann::json& config, std::optional<QuantFormat> quantize, const GgufFile* gguf) {
  KILN_CHECK(!gguf || !quantize, "--quantize: a GGUF file's matrices are served in the file's own quantized types; "
             "plan without --quantize");
  const std::string type = config["model_type"].get<std::string>();
  const models::CausalLmFamily* family = models::find_causal_lm_family(type);
  KILN_CHECK(family, "--serve plans causal language models; model_type '", type, "' is not one Kiln supports (",
             models::supported_causal_lm_types(), ")");
  // The file's dtype as config.json states it (transformers 5 writes "dtype", older files "torch_dtype").
  std::string dtype_name = "float32";
  for (const char* key : {"dtype", "torch_dtype"})
    if (config.contains(key) && config[key].is_string()) {
      dtype_name = config[key].get<std::string>();
      break;
    }
  const std::optional<models::GgufWeightBytes> file_weights =
      gguf ? std::optional(models::gguf_weight_bytes(*gguf)) : std::nullopt;
  if (file_weights) dtype_name = file_weights->dtype == DType::bf16 ? "bfloat16" : "float32";
  std::shared_ptr<models::LanguageModel> model;
  {
    nn::MetaParametersGuard meta;
    model = family->build(config);
  }
  model->to(dtype_parse(dtype_name));
  std::set<const TensorImpl*> matrices;  // what --quantize quantizes
  model->for_each_module([&](const std::string&, nn::Module& m) {
    if (auto* w = dynamic_cast<nn::WeightModule*>(&m)) matrices.insert(&w->weight.impl());
  });
  ServingMemory out;
  out.weights = quantize ? std::string(quant_format_name(*quantize)) + " (matrices) and " + dtype_name : dtype_name;
  if (file_weights) {
    std::string types;
    for (const std::string& t : file_weights->kept_types) types += (types.empty() ? "" : ", ") + t;
    out.weights = types.empty() ? dtype_name : "the file's " + types + " (matrices) and " + dtype_name;
    out.weight_bytes = file_weights->total;
    out.quantized_bytes = file_weights->kept;
  } else {
    for (const auto& p : model->parameters()) {
      if (quantize && matrices.count(&p.impl())) {
        const size_t q = quantized_bytes(*quantize, p.size(0), p.size(1));
        out.quantized_bytes += q;
        out.weight_bytes += q;
      } else {
        out.weight_bytes += p.nbytes();
      }
    }
  }
  // A stream at the full context holds its pages whole.
  const models::KvCache cache = model->new_cache();
  const nn::KvLayout& layout = cache.pool().layout();
  out.context = cache.capacity();
  out.kv_bytes_per_stream = size_t(layout.pages_for(out.context)) * layout.page_bytes();
  out.kv_bytes_per_position = layout.page_bytes() / size_t(layout.page_size);
  return out;
}

std::string serving_memory_text(const ServingMemory& m, int64_t streams, size_t budget, const std::string& target) {
  std::ostringstream s;
  s << "serving: weights " << format_bytes(m.weight_bytes) << " (" << m.weights;
  if (m.quantized_bytes) s << "; the quantized matrices " << format_bytes(m.quantized_bytes);
  s << ")\n  keys and values: " << format_bytes(m.kv_bytes_per_position) << " per position, in pages as a stream grows; "
    << format_bytes(m.kv_bytes_per_stream) << " for a stream at the full context (" << m.context << " positions)\n";
  const size_t total = m.weight_bytes + size_t(streams) * m.kv_bytes_per_stream;
  s << "  total for " << streams << (streams == 1 ? " stream: " : " streams: ") << format_bytes(total) << "\n";
  if (budget) {
    const int64_t fit = budget > m.weight_bytes ? int64_t((budget - m.weight_bytes) / m.kv_bytes_per_stream) : 0;
    s << "  on " << target << " (" << format_bytes(budget) << "): " << (total <= budget ? "fits" : "does not fit")
      << "; " << fit << (fit == 1 ? " stream fits" : " streams fit") << "\n";
  }
  return s.str();
}

}  // namespace kiln::plan
