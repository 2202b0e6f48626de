// The tokenizer a GGUF file describes (its tokenizer.ggml.* metadata), as
// the tokenizer.json that HfTokenizer runs, so that a GGUF file tokenizes as
// llama.cpp tokenizes it (and as the model's own tokenizer did):
//   "llama" (SentencePiece): BPE over the pieces with byte fallback, the
//     merges the file lists or, when it lists none, recovered from the pieces'
//     scores as transformers recovers them; spaces as U+2581 and one before
//     the text unless tokenizer.ggml.add_space_prefix is false;
//   "gpt2" (byte-level BPE): the file's merges, and the text split by the
//     regular expressions of its pre-tokenizer type (tokenizer.ggml.pre),
//     from a table of llama.cpp's types;
//   "bert" (WordPiece): the pieces in BERT's own spelling again (llama.cpp's
//     converter marks a word's first piece with U+2581 and drops "##"),
//     under BERT's normalizer and pre-tokenizer, between [CLS] and [SEP].
// Control, unknown and user-defined tokens are matched whole in the text, as
// llama.cpp matches them; unused ones are no token at all (nothing encodes
// to them, they decode to nothing, as in llama.cpp); BOS/EOS are added as add_bos_token/add_eos_token
// (or the type's default) say. Any other tokenizer model or pre-tokenizer
// type is an error naming it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::text {

struct GgufVocab {
  nlohmann::json tokenizer;                    // for HfTokenizer::from_json
  std::vector<int32_t> end_of_generation_ids;  // what ends a reply: llama.cpp's EOG set
};

// `metadata`: a GGUF file's key-values (kiln/io/gguf_parse.h). Errors name the key at fault.
GgufVocab gguf_vocab(const nlohmann::json& metadata);

struct GgufChatTemplate {
  std::string source;                // tokenizer.chat_template ("" when absent)
  std::string tool_use;              // tokenizer.chat_template.tool_use: for conversations with tools ("": none)
  std::string rerank;                // tokenizer.chat_template.rerank: a reranker's prompt ("": none)
  std::string bos_token, eos_token;  // their text, which templates write ("" when the file names none)
};
GgufChatTemplate gguf_chat_template(const nlohmann::json& metadata);

// GPT-2's split expression (ByteLevel's, with use_regex).
extern const std::string kGpt2Words;
// The tokenizer.ggml.pre type of a byte-level BPE whose text is split by
// `splits` in turn (kGpt2Words for ByteLevel's own), or "" for none of llama.cpp's.
std::string gguf_pre_type_of(const std::vector<std::string>& splits, bool ignore_merges);

// A tokenizer.json as a GGUF file's tokenizer.ggml.* metadata (the inverse of
// gguf_vocab: byte-level BPE, or SentencePiece-style BPE with byte fallback), `vocab_size` tokens (the embedding's rows:
// ids no token has are written as llama.cpp's converter writes them, unused).
nlohmann::json gguf_tokenizer_metadata(const nlohmann::json& tokenizer_json, int64_t vocab_size);

}  // namespace kiln::text
