// Sentence embeddings from a Hugging Face folder, as sentence-transformers
// computes them: the encoder's token states (load_hf_encoder), pooled as the
// folder's modules.json and 1_Pooling/config.json say (mean, [CLS], max,
// mean times sqrt(length), or the last token), projected by its Dense
// modules (EmbeddingGemma's two), then L2-normalised where a Normalize
// module follows. Texts are cut to max_seq_length tokens
// (sentence_bert_config.json), as its tokenizer call truncates them, after
// the prompt config_sentence_transformers.json names by default_prompt_name.
// A folder without modules.json (a bare BertModel) is mean-pooled,
// unnormalised: what SentenceTransformer(dir) builds for it. A GGUF file
// (gguf_encoder.h, or a decoder embedder's) is pooled as its
// <arch>.pooling_type says, projected by its dense_2 and dense_3 where it
// has them (llama.cpp's converter's --sentence-transformers-dense-modules),
// and L2-normalised, as llama-server's embeddings are.
#pragma once
#include <map>
#include <span>
#include <string>
#include <vector>

#include "models/hf/hf_model.h"

namespace kiln::models {

enum class Pooling { cls, mean, max, mean_sqrt_len, last_token };

// sentence-transformers' Dense module on the pooled embedding: activation(W x + b).
struct DenseProjection {
  int64_t in = 0, out = 0;
  std::vector<float> weight, bias;       // [out, in] and [out] (empty: no bias)
  float (*activation)(float) = nullptr;  // null: the identity
};

struct HfEmbedder {
  HfEncoder encoder;
  Pooling pooling = Pooling::mean;
  std::vector<DenseProjection> dense;  // after pooling, in order
  bool normalize = false;
  int64_t max_tokens = 0;  // max_seq_length: a text's tokens past it are cut (its last special token kept)
  int64_t pad_id = 0;
  // config_sentence_transformers.json's prompts by name, and the one before every text (its
  // default_prompt_name's, or the one a caller picks: encode(prompt_name=...)); "" for none.
  std::map<std::string, std::string> prompts;
  std::string prompt;
  int64_t dimensions() const { return dense.empty() ? encoder.model->width() : dense.back().out; }
};

// Refuses by name the modules and pooling modes it does not compute
// (weighted-mean pooling, lower-casing before the tokenizer).
HfEmbedder load_hf_embedder(const std::string& dir, std::optional<DType> dtype = std::nullopt);

// Puts the prompt `name` of the folder's config_sentence_transformers.json
// before every text, as encode(prompt_name=name) does (EmbeddingGemma's
// "query", "document", ...); a name it lacks is an error listing those it has.
void use_prompt(HfEmbedder& e, const std::string& name);
// The prompt `name`'s text (the error use_prompt gives where there is none).
const std::string& prompt_named(const HfEmbedder& e, const std::string& name);

// A text's token ids as the embedder reads them: after its prompt, encoded, then cut to max_tokens.
std::vector<int32_t> embedding_ids(const HfEmbedder& e, const std::string& text);
// The same after `prompt`; *uncut_length (if given) is how many ids there were before the cut.
std::vector<int32_t> embedding_ids(const HfEmbedder& e, const std::string& text, const std::string& prompt,
                                   int64_t* uncut_length);
// Rows of ids (embedding_ids) -> their embeddings [rows, dimensions] f32 on
// the CPU, in one padded pass: each row's as it would be alone.
Tensor embed_ids(HfEmbedder& e, const std::vector<std::vector<int32_t>>& rows);
// d applied to x (d.in wide) -> d.out values, accumulated in f32 as torch's linear does.
std::vector<float> project(const DenseProjection& d, std::span<const float> x);
// `v` scaled to length 1, as torch.nn.functional.normalize does: v / max(|v|, 1e-12).
void l2_normalize(std::span<float> v);
// `v` scaled as llama.cpp's embd_normalize does: -1 not at all, 0 the largest |x| to 32760 (an int16's range),
// 2 to Euclidean length 1, p > 0 to p-norm 1 (a zero vector stays zero).
void normalize_embedding(std::span<float> v, int norm);
std::vector<std::vector<float>> embed_texts(HfEmbedder& e, const std::vector<std::string>& texts);

}  // namespace kiln::models
