#include "models/hf/hf_export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/lora.h"
#include "models/hf/families.h"

namespace kiln::models {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  KILN_CHECK(out, "cannot write ", path.string());
}

}  // namespace

namespace {

// Writes a folder whole or not at all: into a staging folder beside `out`,
// renamed into place. `out` must not exist or be empty.
void write_folder(const std::string& out, const std::function<void(const fs::path& staging)>& fill) {
  const fs::path target(out);
  std::error_code ec;
  if (fs::exists(target) && !(fs::is_directory(target) && fs::is_empty(target)))
    KILN_FAIL("--out ", out, " exists and is not an empty folder; choose another or remove it");
  const fs::path staging = target.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  KILN_CHECK(!ec, "cannot create ", staging.string(), ": ", ec.message());
  try {
    fill(staging);
    if (fs::exists(target)) fs::remove(target);  // an empty folder
    fs::rename(staging, target);
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

}  // namespace

void write_hf_folder(const std::string& out, const HfFolderContents& c) {
  write_folder(out, [&](const fs::path& staging) {
    save_safetensors((staging / "model.safetensors").string(), c.tensors, {{"format", "pt"}});
    write_text(staging / "config.json", c.config.dump(2) + "\n");
    write_text(staging / "generation_config.json", c.generation_config.dump(2) + "\n");
    write_text(staging / "tokenizer_config.json", c.tokenizer_config.dump(2) + "\n");
    write_text(staging / "tokenizer.json", c.tokenizer_json);
  });
}

void write_peft_folder(const std::string& out, const nlohmann::json& adapter_config, const nn::NamedTensors& tensors) {
  write_folder(out, [&](const fs::path& staging) {
    save_safetensors((staging / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
    write_text(staging / "adapter_config.json", adapter_config.dump(2) + "\n");
  });
}

std::string peft_name(const std::string& parameter, const std::string& model_type) {
  const size_t at = parameter.rfind(".lora_");
  KILN_CHECK(at != std::string::npos, "'", parameter, "' is not a LoRA parameter");
  const CausalLmFamily* family = find_causal_lm_family(model_type);
  std::string base = parameter.substr(0, at) + ".weight";
  if (family) base = family->checkpoint_name(base).name;
  return "base_model.model." + base.substr(0, base.size() - 7) + parameter.substr(at);
}

nn::NamedTensors peft_tensors(const nn::Module& model, const std::string& model_type) {
  nn::NamedTensors out;
  for (const auto& [name, p] : nn::lora_parameters(model))
    out.emplace_back(peft_name(name, model_type), p.detach().to(Device::cpu()).contiguous());
  return out;
}

nn::NamedTensors checkpoint_tensors(const nn::Module& model, const std::string& model_type) {
  const CausalLmFamily* family = find_causal_lm_family(model_type);
  nn::NamedTensors out;
  for (const auto& [name, param] : model.named_parameters()) {
    if (nn::is_lora_parameter(name)) continue;  // adapters are exported by peft_tensors (or merged first)
    const CheckpointName c = family ? family->checkpoint_name(name) : CheckpointName{name};
    Tensor cpu = param.detach().to(Device::cpu());
    out.emplace_back(c.name, c.transposed ? cpu.transpose(0, 1).contiguous() : cpu.contiguous());
  }
  model.for_each_module([&](const std::string& prefix, const nn::Module& m) {
    const auto* w = dynamic_cast<const nn::WeightModule*>(&m);
    if (!w || !w->quantized) return;
    const std::string name = family ? family->checkpoint_name(prefix + "weight").name : prefix + "weight";
    // The file holds rows in order; in memory they may be in groups (kiln/core/quantized.h).
    const QuantizedMatrix q = w->quantized->grouped_rows ? ungroup_rows(*w->quantized) : *w->quantized;
    out.emplace_back(name + ".qdata", q.data);
    out.emplace_back(name + ".scales", q.scales);
    if (q.zeros.defined()) out.emplace_back(name + ".zeros", q.zeros);
  });
  return out;
}

nlohmann::json quantization_config(const nn::Module& model) {
  json config;
  model.for_each_module([&](const std::string&, const nn::Module& m) {
    const auto* w = dynamic_cast<const nn::WeightModule*>(&m);
    if (!w || !w->quantized || !config.is_null()) return;
    config = {{"quant_method", "kiln"},
              {"format", quant_format_name(w->quantized->format)},
              {"group_size", kQuantBlock},
              {"dtype", w->quantized->dtype == DType::bf16 ? "bfloat16" : w->quantized->dtype == DType::f16 ? "float16" : "float32"}};
  });
  return config;
}

HfFolderContents gpt_as_hf(const Gpt& model, const std::string& tokenizer_json, int32_t end_of_text) {
  const GptConfig& g = model.config();
  HfFolderContents c;
  c.config = {{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", g.vocab_size},
              {"n_positions", g.block_size},
              {"n_embd", g.n_embd},
              {"n_layer", g.n_layer},
              {"n_head", g.n_head},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"resid_pdrop", g.dropout},
              {"embd_pdrop", g.embedding_dropout.value_or(g.dropout)},
              {"attn_pdrop", g.attention_dropout},
              {"tie_word_embeddings", true},
              {"bos_token_id", end_of_text},
              {"eos_token_id", end_of_text},
              {"dtype", "float32"}};
  c.generation_config = {{"bos_token_id", end_of_text}, {"eos_token_id", end_of_text}};
  c.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                        {"bos_token", "<|endoftext|>"},
                        {"eos_token", "<|endoftext|>"},
                        {"unk_token", "<unk>"},
                        {"model_max_length", g.block_size}};
  c.tokenizer_json = tokenizer_json;
  c.tensors = checkpoint_tensors(model, "gpt2");
  return c;
}

}  // namespace kiln::models
