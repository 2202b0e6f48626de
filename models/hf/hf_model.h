// Hugging Face model folders ("hf:DIR"): config.json, safetensors weights
// (one file, or shards with model.safetensors.index.json), tokenizer.json
// and generation_config.json, as save_pretrained writes them or a hub
// snapshot holds them. Nothing is fetched: the folder is on disk.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/text/hf_tokenizer.h"
#include "models/bert/bert.h"
#include "models/common/language_model.h"

namespace kiln::models {

// "hf:DIR" -> DIR, "gguf:FILE" -> FILE (a leading ~/ is the home folder),
// and "ollama:NAME" -> the GGUF file Ollama keeps for it (ollama_store.h);
// anything else -> nullopt. Wherever a folder's path is taken
// below, a GGUF file's is too (gguf_model.h), but where it says otherwise.
std::optional<std::string> hf_folder(const std::string& spec);
// Whether a model path names a GGUF file (a file) rather than a folder.
bool is_gguf_file(const std::string& path);

// A folder's tokenizer.json, or a GGUF file's tokenizer (kiln/text/gguf_vocab.h).
text::HfTokenizer load_hf_tokenizer(const std::string& dir);

// config.json of a folder, checked to be a JSON object with a model_type.
nlohmann::json read_hf_config(const std::string& dir);

struct HfCausalLm {
  std::string dir, model_type;
  nlohmann::json config;
  std::shared_ptr<LanguageModel> model;
  text::HfTokenizer tokenizer;
  std::vector<int32_t> eos_ids;  // generation ends after any of these
  SamplingFields sampling_defaults;  // the model's own (models/hf/sampling_defaults.h)
  // Where a request or command leaves them out (Ollama's PARAMETER stop and SYSTEM): stop strings, and the
  // system message a conversation without one opens with.
  std::vector<std::string> default_stop;
  std::string default_system;
};

// What the store `spec` names a model in adds to its file's own defaults:
// an Ollama Modelfile's PARAMETERs and SYSTEM for ollama:NAME
// (ollama_store.h), over the file's general.sampling.*; other specs add nothing.
void apply_store_defaults(const std::string& spec, HfCausalLm& lm);

// Loads a causal language model: the architecture from config.json's
// model_type (an unsupported one, or a config key that changes the math and
// Kiln does not implement, is an error naming it), its weights
// memory-mapped in the file's dtype (bf16 stays bf16), or converted copies
// in `dtype` when one is asked for (--precision fp32).
HfCausalLm load_hf_causal_lm(const std::string& dir, std::optional<DType> dtype = std::nullopt);

struct HfClassifier {
  std::string dir, model_type;
  std::shared_ptr<SequenceClassifier> model;  // a BertClassifier, or a CausalLmClassifier
  text::HfTokenizer tokenizer;
  std::vector<std::string> labels;  // id2label, in output order
  int64_t pad_id = 0;               // what pads a batch's shorter rows
  // A GGUF reranker's prompt (tokenizer.chat_template.rerank: Qwen3-Reranker's), {query} and {document} in it;
  // "" for a cross-encoder, whose tokenizer joins a pair.
  std::string rerank_prompt;
};

// Loads a sequence classifier: bert or distilbert, or a causal LM saved with
// a classification head (<Arch>ForSequenceClassification, as `kiln export`
// writes a `kiln train classify` run on a causal LM).
HfClassifier load_hf_classifier(const std::string& dir, std::optional<DType> dtype = std::nullopt);
// The label probabilities of one text, as softmax(model(**tokenizer(text)).logits).
std::vector<double> classify_text(HfClassifier& classifier, const std::string& text);

struct HfEncoder {
  std::string dir, model_type;
  nlohmann::json config;
  std::shared_ptr<TextEncoder> model;
  text::HfTokenizer tokenizer;
};
// Loads a BERT-family encoder alone: BertModel's weights, as
// sentence-transformers saves them (its pooler unused), or a classifier's
// encoder (its head unused). Embeddings pool its states (hf_embedder.h).
HfEncoder load_hf_encoder(const std::string& dir, std::optional<DType> dtype = std::nullopt);

// "causal", "classifier" or "embedder": which kind of model a folder holds,
// from its config.json (read_hf_config): by model_type, and architectures
// naming ...ForSequenceClassification (a causal LM's head) or a bare
// encoder (BertModel, RobertaModel, ...: sentence-transformers' models; a
// causal family's <Arch>Model: a decoder embedder's body).
std::string hf_model_kind(const nlohmann::json& config);
// The same for the folder `dir` whose config.json (read_hf_config) is
// `config`: a causal LM inside a sentence-transformers folder (modules.json)
// is an embedder too. (A GGUF language model that names its pooling has
// an <Arch>Model config: hf_config_from_gguf.)
std::string hf_folder_kind(const std::string& dir, const nlohmann::json& config);

// Points every parameter of `model` (built on the meta device) at the
// tensor of its name in `weights` (views where the dtype agrees, else
// converted copies in `dtype`); a parameter missing or a tensor left over is
// an error naming `source`. For weights that come from elsewhere than a
// folder's safetensors (a GGUF file: gguf_model.h).
void attach_mapped_weights(nn::Module& model, std::map<std::string, Tensor> weights, const std::string& source,
                           const std::string& model_type, std::optional<DType> dtype);

// The weights of a folder (not a GGUF file), name -> tensor, mapped from
// model.safetensors or the shards its index names; every shard is checked as it is mapped.
std::map<std::string, Tensor> map_hf_weights(const std::string& dir);
// A fingerprint of a folder's weights: CRC-32 of every tensor's name, dtype,
// shape and bytes, in name order ("crc32:1a2b3c4d"). A fine-tuning run saves
// its base's and refuses to resume against a base that differs.
std::string hf_weights_hash(const std::string& dir);

}  // namespace kiln::models
