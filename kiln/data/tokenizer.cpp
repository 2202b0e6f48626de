#include "kiln/data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln::data {

namespace {

namespace fs = std::filesystem;

// Bump when a training setting below changes, so old cache files are not reused.
constexpr const char* kSettingsVersion = "kiln-bpe-v1";
constexpr int kByteFallbackPieces = 256;

// Feeds documents to the trainer without writing a temporary text file; a
// document is one "sentence", so pieces may span its newlines.
class DocumentIterator : public sentencepiece::SentenceIterator {
 public:
  explicit DocumentIterator(const std::vector<std::string>& docs) : docs_(docs) { skip_empty(); }
  bool done() const override { return i_ >= docs_.size(); }
  void Next() override {
    ++i_;
    skip_empty();
  }
  const std::string& value() const override { return docs_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void skip_empty() {
    while (i_ < docs_.size() && docs_[i_].empty()) ++i_;
  }
  const std::vector<std::string>& docs_;
  size_t i_ = 0;
};

// FNV-1a, 64-bit: a stable content hash for cache file names (not security).
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void add(const std::string& s) {
    uint64_t n = s.size();
    add(&n, sizeof n);  // length prefix: ["ab","c"] and ["a","bc"] differ
    add(s.data(), s.size());
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, "cannot read tokenizer model ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Write to a unique temporary name, then rename: a reader (or a concurrent
// trainer) never sees a half-written model.
void write_file_atomically(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  KILN_CHECK(!ec, "cannot create tokenizer cache directory ", fs::path(path).parent_path().string(), ": ",
             ec.message(), "; pass a writable cache directory");
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      KILN_FAIL("cannot write tokenizer cache file ", tmp, "; pass a writable cache directory");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    KILN_FAIL("cannot move tokenizer cache file into place at ", path, ": ", ec.message());
  }
}

std::string train_serialized(const std::vector<std::string>& documents, const TokenizerOptions& o) {
  size_t longest = 0;
  for (const std::string& d : documents) longest = std::max(longest, d.size());
  KILN_CHECK(longest > 0, "tokenizer: the training corpus holds no text");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(std::max<size_t>(longest, 4192))},
      // Every document, in order: no sampling, so no randomness at all.
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"eos_piece", kEndOfTextPiece},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      {"num_threads", std::to_string(std::max(1, o.num_threads))},
      {"minloglevel", "2"},  // errors only; training logs a page per run otherwise
  };
  // The trainer keeps global state (flags, log level); one training at a time.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  DocumentIterator it(documents);
  std::string model;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  KILN_CHECK(status.ok(), "tokenizer training failed (vocab_size ", o.vocab_size, "): ", status.ToString(),
             "; vocab_size must exceed the 256 byte pieces + the corpus's distinct characters + 2 special pieces, and ",
             "not exceed what the corpus can supply (SentencePiece names the limit above)");
  return model;
}

}  // namespace

std::string Tokenizer::default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "kiln").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".cache" / "kiln").string();
  return (fs::temp_directory_path() / "kiln-cache").string();
}

std::string Tokenizer::cache_path(const std::vector<std::string>& documents, const TokenizerOptions& o) {
  Fnv1a h;
  h.add(std::string(kSettingsVersion));
  h.add(std::to_string(o.vocab_size));
  uint64_t n = documents.size();
  h.add(&n, sizeof n);
  for (const std::string& d : documents) h.add(d);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.h));
  std::string dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  std::string name = o.corpus_name + "-bpe" + std::to_string(o.vocab_size) + "-" + hex + ".model";
  return (fs::path(dir) / name).string();
}

Tokenizer Tokenizer::from_serialized(const std::string& bytes, const std::string& origin) {
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  auto status = sp->LoadFromSerializedProto(bytes);
  KILN_CHECK(status.ok(), origin, ": not a valid SentencePiece model (", status.ToString(), ")");
  int eot = sp->PieceToId(kEndOfTextPiece);
  KILN_CHECK(sp->GetPieceSize() > kByteFallbackPieces && eot > 0 && eot < sp->GetPieceSize() && sp->IsControl(eot),
             origin, ": the model has no ", kEndOfTextPiece, " control piece; it was not made by Kiln");
  Tokenizer t;
  t.sp_ = std::move(sp);
  t.serialized_ = bytes;
  t.end_of_text_id_ = eot;
  return t;
}

Tokenizer Tokenizer::load(const std::string& model_path) {
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(model_path, ec), "tokenizer model ", model_path, " not found");
  Tokenizer t = from_serialized(read_file(model_path), "tokenizer model " + model_path);
  t.model_path_ = model_path;
  return t;
}

Tokenizer Tokenizer::train_or_load(const std::vector<std::string>& documents, const TokenizerOptions& options) {
  KILN_CHECK(options.vocab_size > kByteFallbackPieces + 2, "tokenizer vocab_size ", options.vocab_size,
             " is too small: it must exceed the 256 byte pieces plus the corpus's characters");
  const std::string path = cache_path(documents, options);
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    try {
      return load(path);
    } catch (const Error&) {
      // A damaged cache file (a crash mid-write on an old version, disk
      // trouble): training is cheap and deterministic, so rebuild it.
    }
  }
  Tokenizer t = from_serialized(train_serialized(documents, options), "freshly trained tokenizer");
  write_file_atomically(path, t.serialized_);
  t.model_path_ = path;
  t.trained_ = true;
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  KILN_CHECK(sp_, "encode on an empty Tokenizer");
  std::vector<int> ids;
  auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  KILN_CHECK(status.ok(), "tokenizer encode failed: ", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  KILN_CHECK(sp_, "decode on an empty Tokenizer");
  const int n = sp_->GetPieceSize();
  std::vector<int> v;
  v.reserve(ids.size());
  for (int32_t id : ids) {
    KILN_CHECK(id >= 0 && id < n, "tokenizer decode: id ", id, " is outside the vocabulary [0, ", n, ")");
    if (!sp_->IsControl(id)) v.push_back(id);
  }
  std::string out;
  auto status = sp_->Decode(v, &out);
  KILN_CHECK(status.ok(), "tokenizer decode failed: ", status.ToString());
  return out;
}

int Tokenizer::vocab_size() const {
  KILN_CHECK(sp_, "vocab_size on an empty Tokenizer");
  return sp_->GetPieceSize();
}

std::string Tokenizer::piece(int32_t id) const {
  KILN_CHECK(sp_ && id >= 0 && id < sp_->GetPieceSize(), "tokenizer: id ", id, " is outside the vocabulary");
  return sp_->IdToPiece(id);
}

std::string Tokenizer::to_tokenizer_json() const {
  KILN_CHECK(sp_, "tokenizer: no model loaded");
  const int n = sp_->GetPieceSize();
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::unordered_map<std::string, int> id_of;
  for (int id = 0; id < n; ++id) {
    vocab[sp_->IdToPiece(id)] = id;
    id_of[sp_->IdToPiece(id)] = id;
  }
  // SentencePiece's BPE merges the adjacent pair whose joined piece ranks
  // first (the lowest id among learned pieces); as merges, every split of
  // each learned piece into two pieces, ranked by the joined piece's id
  // (transformers' SentencePieceExtractor does the same).
  nlohmann::json merges = nlohmann::json::array();
  for (int id = 0; id < n; ++id) {
    if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsByte(id)) continue;
    const std::string piece = sp_->IdToPiece(id);
    std::vector<std::pair<int, int>> splits;
    for (size_t at = 1; at < piece.size(); ++at) {
      if ((uint8_t(piece[at]) & 0xC0) == 0x80) continue;  // inside a UTF-8 character
      auto l = id_of.find(piece.substr(0, at)), r = id_of.find(piece.substr(at));
      if (l != id_of.end() && r != id_of.end()) splits.emplace_back(l->second, r->second);
    }
    std::sort(splits.begin(), splits.end());
    for (auto [l, r] : splits) merges.push_back({sp_->IdToPiece(l), sp_->IdToPiece(r)});
  }
  const std::string eot = sp_->IdToPiece(end_of_text_id_), unk = sp_->IdToPiece(sp_->unk_id());
  auto added = [](int id, const std::string& content) {
    return nlohmann::json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {added(sp_->unk_id(), unk), added(end_of_text_id_, eot)};
  // Kiln's model: identity normalisation and no dummy prefix; spaces are "▁".
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  j["pre_tokenizer"] = nullptr;
  j["model"] = {{"type", "BPE"},         {"dropout", nullptr}, {"unk_token", unk},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},      {"byte_fallback", true}, {"ignore_merges", false},
                {"vocab", vocab},        {"merges", merges}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", eot}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"pair", {{{"SpecialToken", {{"id", eot}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                   {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                         {"special_tokens", {{eot, {{"id", eot}, {"ids", {end_of_text_id_}}, {"tokens", {eot}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}}}}};
  return j.dump(1);
}

}  // namespace kiln::data
