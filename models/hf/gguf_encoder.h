// BERT encoders read from GGUF (general.architecture "bert": what llama.cpp's
// converter writes for BertModel and its sentence-transformers models, and
// what Ollama ships as all-minilm, mxbai-embed-large and bge-large; and
// "nomic-bert": Ollama's nomic-embed-text): the config.json the checkpoint
// would carry (transformers' BertModel's, nomic's own), and its tensors by
// the checkpoint's names, all in f32 (F16 and quantized ones widened at load:
// embedding models are small, and the converter mixes types). Their vocabulary is kiln/text/gguf_vocab.h's
// WordPiece; their pooling, the embedder's (models/hf/hf_embedder.h).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/core/tensor.h"
#include "kiln/io/gguf.h"
#include "models/hf/gguf_architectures.h"

namespace kiln::models {

// general.architecture ("" if it is not a string); whether it is an encoder Kiln reads (gguf_encoder_names.h).
std::string gguf_encoder_arch_name(const nlohmann::json& metadata);
bool is_gguf_encoder(const nlohmann::json& metadata);
nlohmann::json gguf_encoder_config(const GgufContents& file);
// A reranker's labels (cls.output's rows, named by classifier.output_labels where the file has them) as id2label.
nlohmann::json gguf_classifier_id2label(const GgufContents& file, const GgufMeta& meta);
std::map<std::string, Tensor> gguf_encoder_weights(const GgufFile& file);

}  // namespace kiln::models
