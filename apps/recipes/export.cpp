#include "apps/recipes/export.h"

#include <filesystem>
#include <optional>

#include "apps/recipes/classify_finetune.h"
#include "apps/recipes/common.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/sft_model.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/text_file.h"
#include "models/hf/gguf_export.h"
#include "models/hf/gguf_model.h"
#include "models/hf/hf_chat.h"
#include "models/hf/hf_export.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json_or_empty(const fs::path& path) {
  return fs::exists(path) ? read_json_file(path.string()) : nlohmann::json::object();
}

// The weights of `model` written as `type`'s checkpoint, quantized first if
// asked. A model from a GGUF file has its quantized matrices (ggml's types,
// which a folder cannot hold) written in float, or quantized again from float.
void take_weights(models::HfFolderContents& c, nn::Module& model, const std::string& type, const std::string& quantize,
                  bool from_gguf = false) {
  if (from_gguf)
    model.for_each_module([](const std::string&, nn::Module& m) {
      if (auto* w = dynamic_cast<nn::WeightModule*>(&m)) w->dequantize();
    });
  if (!quantize.empty()) nn::quantize_weights(model, parse_quant_format(quantize));
  c.tensors = models::checkpoint_tensors(model, type);
  if (const auto q = models::quantization_config(model); !q.is_null()) c.config["quantization_config"] = q;
}

}  // namespace

models::HfFolderContents hf_folder_files(const std::string& dir) {
  if (models::is_gguf_file(dir)) return models::gguf_folder_files(dir);
  models::HfFolderContents c;
  c.config = models::read_hf_config(dir);
  c.tokenizer_json = read_text_file((fs::path(dir) / "tokenizer.json").string());
  c.tokenizer_config = read_json_or_empty(fs::path(dir) / "tokenizer_config.json");
  // Its templates wherever it keeps them (chat_template.jinja, as transformers 5 saves them), in the config's form.
  if (const nlohmann::json templates = models::folder_chat_templates(dir); !templates.is_null())
    c.tokenizer_config["chat_template"] = templates;
  c.generation_config = read_json_or_empty(fs::path(dir) / "generation_config.json");
  return c;
}

namespace {

// A loaded folder written back: its files as they are, its weights as the
// module holds them now.
models::HfFolderContents loaded_folder(const std::string& dir, const std::string& quantize,
                                       std::optional<DType> dtype = std::nullopt) {
  models::HfFolderContents c = hf_folder_files(dir);
  const std::string type = c.config["model_type"].get<std::string>();
  if (models::hf_model_kind(c.config) == "classifier") {
    KILN_CHECK(quantize.empty(), "--quantize exports language models; ", dir, " is a classifier");
    const auto classifier = models::load_hf_classifier(dir).model;
    KILN_CHECK(!std::dynamic_pointer_cast<models::CausalLmClassifier>(classifier), dir, " is a causal language model "
               "with a classification head, already a folder transformers loads; Kiln exports such classifiers from "
               "the kiln train classify run that made them");
    c.tensors = models::checkpoint_tensors(*classifier, type);
  } else {
    take_weights(c, *models::load_hf_causal_lm(dir, dtype).model, type, quantize, models::is_gguf_file(dir));
  }
  return c;
}

// A fortunes-gpt run as GPT2LMHeadModel's folder.
models::HfFolderContents gpt_run_contents(const Checkpoint& ck, const std::string& ckdir, const std::string& quantize) {
  auto gpt = load_gpt(ck, Device::cpu());
  const data::Tokenizer tok = load_run_tokenizer(ckdir, ck);
  models::HfFolderContents c = models::gpt_as_hf(*gpt, tok.to_tokenizer_json(), tok.end_of_text_id());
  if (!quantize.empty()) take_weights(c, *gpt, "gpt2", quantize);
  return c;
}

}  // namespace

void export_hf(const std::string& source, const std::string& out, const std::string& quantize) {
  if (auto dir = models::hf_folder(source)) return models::write_hf_folder(out, loaded_folder(*dir, quantize));
  const std::string ckdir = resolve_checkpoint(source);
  const Checkpoint ck = load_checkpoint(ckdir);
  const std::string recipe = ck.state.value("recipe", std::string());
  if (recipe == "sft") return export_sft_hf(source, out, false);
  if (recipe == "classify") return models::write_hf_folder(out, classifier_as_hf(ck));
  KILN_CHECK(recipe == "fortunes-gpt", source, " holds a ", recipe,
             " run; --format hf exports fortunes-gpt, sft and classify runs, or hf:DIR");
  models::write_hf_folder(out, gpt_run_contents(ck, ckdir, quantize));
}

namespace {

Checkpoint sft_checkpoint(const std::string& run) {
  Checkpoint ck = load_checkpoint(resolve_checkpoint(run));
  KILN_CHECK(ck.state.value("recipe", std::string()) == "sft", run, " is not a fine-tuning (kiln train sft) run");
  return ck;
}

models::HfFolderContents sft_contents(const std::string& run, bool merge, const std::string& format) {
  const Checkpoint ck = sft_checkpoint(run);
  const SftSettings s = SftSettings::from_json(ck.state.at("sft"));
  KILN_CHECK(!s.lora || merge, run, " trained LoRA adapters: export them with --format peft, or merged into the base "
             "with --format ", format, " --merge");
  models::HfCausalLm lm = load_sft_checkpoint(ck, true);
  models::HfFolderContents c = hf_folder_files(s.base);
  take_weights(c, *lm.model, lm.model_type, "", models::is_gguf_file(s.base));
  return c;
}

// A folder's or file's name, for general.name ("runs/sft/" -> "sft", "m.gguf" -> "m").
std::string name_of(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();  // ("Qwen2.5-0.5B" keeps its dots)
}

}  // namespace

void export_sft_hf(const std::string& run, const std::string& out, bool merge) {
  models::write_hf_folder(out, sft_contents(run, merge, "hf"));
}

std::vector<std::string> export_gguf(const std::string& source, const std::string& out, const std::string& type,
                                     bool merge) {
  KILN_CHECK(!std::filesystem::exists(out), out, " exists; kiln export writes a new file");
  if (auto dir = models::hf_folder(source)) {
    KILN_CHECK(!merge, "--merge merges a LoRA run's adapters; ", source, " is a model");
    // A GGUF file keeps norms and routers in F32 beside F16 matrices; a model runs in one dtype, so it is loaded
    // in f32 to write them back as they were.
    const std::optional<DType> dtype = models::is_gguf_file(*dir) ? std::optional(DType::f32) : std::nullopt;
    return models::write_gguf_model(out, loaded_folder(*dir, "", dtype), type, name_of(*dir));
  }
  const std::string ckdir = resolve_checkpoint(source);
  const Checkpoint ck = load_checkpoint(ckdir);
  const std::string recipe = ck.state.value("recipe", std::string());
  KILN_CHECK(recipe == "sft" || recipe == "fortunes-gpt", source, " holds a ", recipe, " run; --format gguf exports "
             "hf:DIR, gguf:FILE, and kiln train sft and fortunes-gpt runs");
  KILN_CHECK(recipe == "sft" || !merge, "--merge merges a LoRA run's adapters; ", source, " is a fortunes-gpt run");
  return models::write_gguf_model(out, recipe == "sft" ? sft_contents(source, merge, "gguf") : gpt_run_contents(ck, ckdir, ""),
                                  type, name_of(source));
}

void export_peft(const std::string& run, const std::string& out) {
  const Checkpoint ck = sft_checkpoint(run);
  const SftSettings s = SftSettings::from_json(ck.state.at("sft"));
  KILN_CHECK(s.lora, run, " fine-tuned every weight and has no adapters; export it with --format hf");
  models::HfCausalLm lm = load_sft_checkpoint(ck, false);
  std::vector<std::string> adapted;
  for (const auto& [name, p] : nn::lora_parameters(*lm.model))
    if (name.ends_with(".lora_A.weight")) adapted.push_back(name.substr(0, name.size() - 14));
  models::write_peft_folder(out, peft_adapter_config(s, lm.model_type, adapted), models::peft_tensors(*lm.model, lm.model_type));
}

}  // namespace kiln::recipes
