#include "apps/recipes/sft_model.h"

#include <filesystem>
#include <set>

#include "apps/recipes/common.h"
#include "apps/recipes/export.h"
#include "kiln/distributed/world.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/text_file.h"
#include "models/hf/families.h"
#include "models/hf/hf_export.h"

namespace kiln::recipes {

using nlohmann::json;
namespace fs = std::filesystem;

json SftSettings::to_json() const {
  json j{{"base", base}, {"base_hash", base_hash}, {"data", data}, {"val", val}, {"max_seq_len", max_seq_len},
         {"packing", packing}, {"chat_template", chat_template}, {"lora", nullptr}, {"lora_from", lora_from},
         {"quantize_base", quantize_base}, {"teacher", teacher},
         {"temperature", temperature}, {"alpha", alpha}};
  if (lora)
    j["lora"] = {{"rank", lora->rank}, {"alpha", lora->alpha}, {"dropout", lora->dropout}, {"targets", lora->targets}};
  return j;
}

SftSettings SftSettings::from_json(const json& j) {
  KILN_CHECK(j.is_object() && j.contains("base"), "the checkpoint's state.json has no fine-tuning settings (\"sft\")");
  SftSettings s;
  s.base = j.at("base").get<std::string>();
  s.base_hash = j.at("base_hash").get<std::string>();
  s.data = j.at("data").get<std::string>();
  s.val = j.value("val", std::string());
  s.max_seq_len = j.at("max_seq_len").get<int64_t>();
  s.chat_template = j.value("chat_template", std::string());
  s.packing = j.value("packing", false);
  s.lora_from = j.value("lora_from", std::string());
  s.quantize_base = j.value("quantize_base", std::string());
  s.teacher = j.value("teacher", std::string());
  s.temperature = j.value("temperature", 2.0);
  s.alpha = j.value("alpha", 0.5);
  if (const json& l = j.at("lora"); !l.is_null()) {
    nn::LoraConfig c;
    c.rank = l.at("rank").get<int64_t>();
    c.alpha = l.at("alpha").get<double>();
    c.dropout = l.at("dropout").get<double>();
    c.targets = l.at("targets").get<std::vector<std::string>>();
    s.lora = c;
  }
  return s;
}

PeftAdapter read_peft_folder(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  KILN_CHECK(fs::exists(config_path), dir, " holds no adapter_config.json: --lora-from takes a peft adapter folder "
             "(what PeftModel.save_pretrained or kiln export --format peft writes)");
  const json c = read_json_file(config_path.string());
  KILN_CHECK(c.is_object() && c.value("peft_type", std::string()) == "LORA", config_path.string(),
             ": peft_type must be \"LORA\" (Kiln trains LoRA adapters only)");
  for (const char* off : {"use_dora", "use_rslora"})
    KILN_CHECK(!c.value(off, false), config_path.string(), ": ", off, " is not implemented by Kiln");
  KILN_CHECK(c.value("bias", std::string("none")) == "none", config_path.string(), ": bias \"",
             c.value("bias", std::string()), "\" is not implemented (Kiln's adapters train no biases)");
  KILN_CHECK(c.value("modules_to_save", json()).is_null(), config_path.string(),
             ": modules_to_save is not implemented by Kiln");
  KILN_CHECK(c.value("rank_pattern", json::object()).empty() && c.value("alpha_pattern", json::object()).empty(),
             config_path.string(), ": per-layer ranks and alphas (rank_pattern, alpha_pattern) are not implemented");
  PeftAdapter a;
  try {
    a.config.rank = c.at("r").get<int64_t>();
    a.config.alpha = c.at("lora_alpha").get<double>();
    a.config.dropout = c.value("lora_dropout", 0.0);
    const json& t = c.at("target_modules");
    a.config.targets = t.is_string() ? std::vector<std::string>{t.get<std::string>()} : t.get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    KILN_FAIL(config_path.string(), ": r, lora_alpha and target_modules must be given as peft writes them (", e.what(),
              ")");
  }
  KILN_CHECK(a.config.targets.size() != 1 || a.config.targets[0] == "all-linear" ||
                 a.config.targets[0].find_first_of("*()[]|\\^$") == std::string::npos,
             config_path.string(), ": target_modules as a regular expression is not implemented; list the names");
  a.tensors = load_safetensors((fs::path(dir) / "adapter_model.safetensors").string()).tensors;
  return a;
}

std::string absolute_path(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

std::string fine_tune_folder(const std::string& spec, const std::string& out_dir, const char* name,
                             const std::function<void(const std::string&)>& log) {
  if (const auto dir = models::hf_folder(spec)) return absolute_path(*dir);
  const std::string folder = absolute_path((fs::path(out_dir) / name).string());
  distributed::rank0_first([&] {
    if (fs::exists(fs::path(folder) / "config.json")) return;
    log("exporting the run " + spec + " as a Hugging Face folder: " + folder);
    export_hf(spec, folder);
  });
  return folder;
}

DType lora_base_dtype(const std::string& precision) {
  return precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
}

models::HfCausalLm load_sft_model(const SftSettings& s, std::optional<DType> base_dtype, uint64_t seed,
                                  std::shared_ptr<Generator> dropout_gen, std::vector<std::string>* adapted) {
  models::HfCausalLm lm = models::load_hf_causal_lm(s.base, base_dtype);
  if (dropout_gen) lm.model->use_dropout_generator(dropout_gen);  // config.json's dropouts, saved with the run
  if (!s.lora) return lm;
  // A quantized GGUF file's embedding and head: float, as QLoRA keeps them (the loss reads the head's weights).
  lm.model->for_each_module([&](const std::string& path, nn::Module& m) {
    if (auto* w = dynamic_cast<nn::WeightModule*>(&m); w && (path == "lm_head." || dynamic_cast<nn::Embedding*>(&m)))
      w->dequantize();
  });
  // Quantized before the adapters exist, so they stay f32 and trainable; as
  // bitsandbytes quantizes for QLoRA, the blocks' linear layers only: the
  // embeddings and the head stay as loaded (the loss never holds the logits).
  if (!s.quantize_base.empty()) {
    const QuantFormat format = parse_quant_format(s.quantize_base);
    lm.model->for_each_module([&](const std::string& path, nn::Module& m) {
      if (auto* linear = dynamic_cast<nn::Linear*>(&m); linear && path != "lm_head.") linear->quantize(format);
    });
  }
  Generator init(seed ^ 0x10A10A10Aull);
  const std::vector<std::string> layers = nn::apply_lora(*lm.model, *s.lora, init, std::move(dropout_gen));
  if (adapted) *adapted = layers;
  if (s.lora_from.empty()) return lm;
  const PeftAdapter from = read_peft_folder(s.lora_from);
  nn::NamedTensors values;
  std::set<std::string> used;
  for (const auto& [name, p] : nn::lora_parameters(*lm.model)) {
    const std::string key = models::peft_name(name, lm.model_type);
    const auto it = from.tensors.find(key);
    KILN_CHECK(it != from.tensors.end(), s.lora_from, "/adapter_model.safetensors has no '", key, "'");
    values.emplace_back(name, it->second.to(DType::f32));
    used.insert(key);
  }
  for (const auto& [key, t] : from.tensors)
    KILN_CHECK(used.count(key), s.lora_from, "/adapter_model.safetensors holds '", key, "', which no adapted layer of ",
               s.base, " takes (its target_modules differ?)");
  nn::Module& model = *lm.model;
  model.load_trainable_parameters(values);
  return lm;
}

models::HfCausalLm load_sft_checkpoint(const Checkpoint& ck, bool merge) {
  const SftSettings s = SftSettings::from_json(ck.state.value("sft", json()));
  const std::string hash = models::hf_weights_hash(s.base);
  KILN_CHECK(hash == s.base_hash, "the base model ", s.base, " changed since the run trained on it (weights hash ", hash,
             ", the run's ", s.base_hash, "); restore that base");
  SftSettings fresh = s;
  fresh.lora_from.clear();  // the checkpoint holds the trained adapters
  fresh.quantize_base.clear();  // adapters trained on a quantized base merge into, or run on, the base as stored
  // A full fine-tune's checkpoint holds f32 weights; adapters go on the base as stored.
  models::HfCausalLm lm = load_sft_model(fresh, s.lora ? std::nullopt : std::optional<DType>(DType::f32), 0, nullptr);
  lm.model->load_trainable_parameters(to_pairs(ck.model));
  if (merge) nn::merge_lora(*lm.model);
  lm.model->eval();
  return lm;
}

json peft_adapter_config(const SftSettings& s, const std::string& model_type, const std::vector<std::string>& adapted) {
  KILN_CHECK(s.lora, "this run fine-tuned every weight; it has no adapters (export it with --format hf)");
  const models::CausalLmFamily& family = *models::find_causal_lm_family(model_type);
  std::set<std::string> leaves;
  for (const std::string& path : adapted) leaves.insert(path.substr(path.rfind('.') + 1));
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", s.base},
          {"r", s.lora->rank},
          {"lora_alpha", s.lora->alpha},
          {"lora_dropout", s.lora->dropout},
          {"target_modules", std::vector<std::string>(leaves.begin(), leaves.end())},
          {"bias", "none"},
          {"fan_in_fan_out", family.lora_fan_in_fan_out},
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"modules_to_save", nullptr},
          {"use_rslora", false},
          {"use_dora", false},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", json::object()},
          {"alpha_pattern", json::object()},
          {"revision", nullptr}};
}

}  // namespace kiln::recipes
