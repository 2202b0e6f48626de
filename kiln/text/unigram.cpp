// The Unigram model (SentencePiece's, as T5, XLM-RoBERTa and ALBERT ship
// it): a word becomes the pieces whose scores sum highest (Viterbi over
// every vocabulary piece that starts at each character), exactly as
// `tokenizers` computes it: ties keep the first piece found (shortest
// first), a character no piece covers is <unk> scored min_score - 10,
// adjacent <unk>s fuse into one, and byte_fallback spells an unknown piece
// as <0xXX> tokens when the vocabulary has them all.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/text/models.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

constexpr double kUnknownPenalty = 10.0;

class Unigram : public TokenModel {
 public:
  explicit Unigram(const nlohmann::json& j) {
    KILN_CHECK(j.contains("vocab") && j["vocab"].is_array(), "tokenizer.json: Unigram has no \"vocab\" list");
    pieces_.reserve(j["vocab"].size());
    for (const auto& entry : j["vocab"]) {
      KILN_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number(),
                 "tokenizer.json: a Unigram vocab entry is not [piece, score]: ", entry.dump().substr(0, 80));
      pieces_.emplace_back(entry[0].get<std::string>(), entry[1].get<double>());
    }
    KILN_CHECK(pieces_.size() < (size_t(1) << 31), "tokenizer.json: the Unigram vocabulary is too large");
    for (size_t id = 0; id < pieces_.size(); ++id) {
      const std::string& p = pieces_[id].first;
      ids_.emplace(std::string_view(p), int32_t(id));  // the first of duplicate pieces keeps its id, as there
      max_piece_bytes_ = std::max(max_piece_bytes_, p.size());
      min_score_ = std::min(min_score_, pieces_[id].second);
    }
    if (j.contains("unk_id") && !j["unk_id"].is_null()) {
      unk_ = read_token_id(j["unk_id"], "Unigram unk_id");
      KILN_CHECK(size_t(unk_) < pieces_.size(), "tokenizer.json: Unigram unk_id ", unk_, " is past the vocabulary");
    }
    byte_fallback_ = j.value("byte_fallback", false);
  }

  void encode_word(const std::string& word, std::vector<int32_t>& ids) const override {
    for (const std::string& piece : best_pieces(word)) {
      if (auto it = ids_.find(piece); it != ids_.end()) {
        ids.push_back(it->second);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (unsigned char b : piece) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", b);
          auto it = ids_.find(name);
          if (it == ids_.end()) break;
          bytes.push_back(it->second);
        }
        if (bytes.size() == piece.size()) {
          ids.insert(ids.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      KILN_CHECK(unk_ >= 0, "tokenizer.json: the Unigram model has no unk_id for '", piece, "'");
      ids.push_back(unk_);
    }
  }

  std::vector<std::string> vocabulary() const override {
    std::vector<std::string> out;
    out.reserve(pieces_.size());
    for (const auto& p : pieces_) out.push_back(p.first);
    return out;
  }

 private:
  struct Node {
    double score = 0;
    int64_t starts_at = -1;
    int32_t id = -1;
  };

  std::vector<std::string> best_pieces(const std::string& s) const {
    if (s.empty()) return {};
    const size_t n = s.size();
    std::vector<Node> best(n + 1);
    best[0].starts_at = 0;
    for (size_t at = 0; at < n;) {
      const size_t char_len = std::max<size_t>(1, utf8_char_length(s, at));
      bool single_char_piece = false;
      for (size_t len = 1; len <= max_piece_bytes_ && at + len <= n; ++len) {
        auto it = ids_.find(std::string_view(s).substr(at, len));
        if (it == ids_.end()) continue;
        const double candidate = pieces_[size_t(it->second)].second + best[at].score;
        Node& target = best[at + len];
        if (target.starts_at < 0 || candidate > target.score) target = {candidate, int64_t(at), it->second};
        single_char_piece = single_char_piece || len == char_len;
      }
      if (!single_char_piece) {
        KILN_CHECK(unk_ >= 0, "tokenizer.json: the Unigram model has no unk_id for a character it cannot cover");
        const double candidate = min_score_ - kUnknownPenalty + best[at].score;
        Node& target = best[std::min(n, at + char_len)];
        if (target.starts_at < 0 || candidate > target.score) target = {candidate, int64_t(at), unk_};
      }
      at += char_len;
    }
    std::vector<std::string> pieces;
    std::string unknown;  // adjacent <unk>s, fused (read backwards)
    for (size_t end = n; end > 0;) {
      const Node& node = best[end];
      const size_t start = size_t(node.starts_at);
      if (node.id == unk_) {
        unknown.insert(0, s.substr(start, end - start));
      } else {
        if (!unknown.empty()) pieces.push_back(std::move(unknown)), unknown.clear();
        pieces.push_back(s.substr(start, end - start));
      }
      end = start;
    }
    if (!unknown.empty()) pieces.push_back(std::move(unknown));
    std::reverse(pieces.begin(), pieces.end());
    return pieces;
  }

  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string_view, int32_t> ids_;
  size_t max_piece_bytes_ = 0;
  double min_score_ = std::numeric_limits<double>::max();
  int32_t unk_ = -1;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<TokenModel> make_unigram(const nlohmann::json& j) { return std::make_unique<Unigram>(j); }

}  // namespace kiln::text
