#include "apps/plan/serving.h"

#include <set>
#include <sstream>

#include "kiln/core/units.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "models/hf/families.h"

namespace kiln::plan {

ServingMemory serving_memory(const nlohmann::json& config, std::optional<QuantFormat> quantize) {
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
  for (const auto& p : model->parameters()) {
    if (quantize && matrices.count(&p.impl())) {
      const size_t q = quantized_bytes(*quantize, p.size(0), p.size(1));
      out.quantized_bytes += q;
      out.weight_bytes += q;
    } else {
      out.weight_bytes += p.nbytes();
    }
  }
  const models::KvCache cache = model->new_cache();
  for (const auto* side : {&cache.k, &cache.v})
    for (const Tensor& t : *side) out.kv_bytes_per_stream += t.nbytes();
  out.context = cache.k.empty() ? 0 : cache.k.front().size(2);
  return out;
}

std::string serving_memory_text(const ServingMemory& m, int64_t streams, size_t budget, const std::string& target) {
  std::ostringstream s;
  s << "serving: weights " << format_bytes(m.weight_bytes) << " (" << m.weights;
  if (m.quantized_bytes) s << "; the quantized matrices " << format_bytes(m.quantized_bytes);
  s << ")\n  keys and values: " << format_bytes(m.kv_bytes_per_stream) << " per stream (" << m.context
    << " positions, allocated whole)\n";
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
