// A byte-fallback BPE tokenizer (SentencePiece) trained on a corpus of
// documents and cached on disk, so a corpus is tokenised the same way by every
// run and trained only once.
//
// Settings, and why:
// - identity normalisation, no whitespace folding, no dummy prefix: the text
//   is kept byte for byte (indentation, tabs and ASCII art matter in the
//   fortunes), so decode(encode(s)) == s for every UTF-8 string;
// - byte fallback: characters unseen in training (a user's emoji) still encode
//   to the 256 byte pieces instead of <unk>;
// - ids 0 = <unk> (never produced, thanks to byte fallback) and
//   1 = <|endoftext|>, a control piece that separates documents; text never
//   encodes to it, even text that spells "<|endoftext|>".
// - default vocabulary 4096: see docs/DATA.md for the measurement behind it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace kiln::data {

struct TokenizerOptions {
  int vocab_size = 4096;  // see docs/DATA.md, "Vocabulary size"
  // Where trained models are kept; empty: $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
  std::string cache_dir;
  // Names the cache file, e.g. "fortunes" -> fortunes-bpe2048-<hash>.model.
  std::string corpus_name = "corpus";
  int num_threads = 2;  // training threads; the result does not depend on it
};

class Tokenizer {
 public:
  // Loads the cached model for (corpus, options) or trains and caches one.
  // A cache file that does not load or does not match is retrained and
  // replaced. Training is deterministic and takes a few seconds for the
  // fortunes corpus on two cores.
  static Tokenizer train_or_load(const std::vector<std::string>& documents, const TokenizerOptions& options = {});
  // Loads a model file written by train_or_load; throws naming the file.
  static Tokenizer load(const std::string& model_path);

  std::vector<int32_t> encode(std::string_view text) const;
  // Control ids (end-of-text) decode to nothing; ids outside the vocabulary throw.
  std::string decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const;
  int32_t end_of_text_id() const { return end_of_text_id_; }
  // The piece for one id ("▁the", "<0x0A>", ...), for debugging.
  std::string piece(int32_t id) const;
  // The same model as a Hugging Face tokenizer.json (a BPE with byte
  // fallback, merges ranked as SentencePiece ranks its pieces), whose
  // tokenizer(text) gives the end-of-text id and then encode(text): how
  // Kiln's GPT sees every document. For `kiln export --format hf`.
  std::string to_tokenizer_json() const;

  // True when this object trained the model, false when it came from the cache.
  bool trained() const { return trained_; }
  const std::string& model_path() const { return model_path_; }
  // The exact bytes of the model, for embedding in checkpoints.
  const std::string& serialized_model() const { return serialized_; }

  static std::string default_cache_dir();
  // The cache file for (documents, options): <dir>/<name>-bpe<V>-<hash>.model,
  // the hash covering the documents and every training setting.
  static std::string cache_path(const std::vector<std::string>& documents, const TokenizerOptions& options);

  // Builds a tokenizer from model bytes; throws (naming `origin`) if they do
  // not hold a valid model with an end-of-text piece.
  static Tokenizer from_serialized(const std::string& bytes, const std::string& origin);

 private:
  std::shared_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string serialized_;
  std::string model_path_;
  int32_t end_of_text_id_ = -1;
  bool trained_ = false;
};

// The end-of-text piece's text.
inline constexpr const char* kEndOfTextPiece = "<|endoftext|>";

}  // namespace kiln::data
