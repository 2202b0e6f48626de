// Sentence embeddings from a Hugging Face folder, as sentence-transformers
// computes them: the encoder's token states (load_hf_encoder), pooled as the
// folder's modules.json and 1_Pooling/config.json say (mean, [CLS], max,
// mean times sqrt(length), or the last token), then L2-normalised where a
// Normalize module follows. Texts are cut to max_seq_length tokens
// (sentence_bert_config.json), as its tokenizer call truncates them. A folder
// without modules.json (a bare BertModel) is mean-pooled, unnormalised:
// what SentenceTransformer(dir) builds for it. A BERT GGUF file
// (gguf_encoder.h) is pooled as its <arch>.pooling_type says and
// L2-normalised, as llama-server's embeddings are.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "models/hf/hf_model.h"

namespace kiln::models {

enum class Pooling { cls, mean, max, mean_sqrt_len, last_token };

struct HfEmbedder {
  HfEncoder encoder;
  Pooling pooling = Pooling::mean;
  bool normalize = false;
  int64_t max_tokens = 0;  // max_seq_length: a text's tokens past it are cut (its last special token kept)
  int64_t pad_id = 0;
  int64_t dimensions() const { return encoder.model->width(); }
};

// Refuses by name the modules and pooling modes it does not compute (Dense
// layers, weighted-mean pooling, lower-casing before the tokenizer).
HfEmbedder load_hf_embedder(const std::string& dir, std::optional<DType> dtype = std::nullopt);

// A text's token ids as the embedder reads them: encoded, then cut to max_tokens.
std::vector<int32_t> embedding_ids(const HfEmbedder& e, const std::string& text);
// Rows of ids (embedding_ids) -> their embeddings [rows, dimensions] f32 on
// the CPU, in one padded pass: each row's as it would be alone.
Tensor embed_ids(HfEmbedder& e, const std::vector<std::vector<int32_t>>& rows);
// `v` scaled to length 1, as torch.nn.functional.normalize does: v / max(|v|, 1e-12).
void l2_normalize(std::span<float> v);
std::vector<std::vector<float>> embed_texts(HfEmbedder& e, const std::vector<std::string>& texts);

}  // namespace kiln::models
