#include "kiln/text/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/text/models.h"
#include "kiln/text/unicode.h"
#include "kiln/text/utf8.h"

namespace kiln::text {

HfTokenizer HfTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    KILN_FAIL("cannot read tokenizer ", path,
              ": the model folder needs the tokenizer.json that save_pretrained writes (see docs/REAL_MODELS.md)");
  std::stringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), path);
}

HfTokenizer HfTokenizer::from_json_text(const std::string& json_text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(origin, " is not valid JSON: ", e.what());
  }
  return from_json(j, origin);
}

HfTokenizer HfTokenizer::from_json(const nlohmann::json& j, const std::string& origin) {
  HfTokenizer t;
  try {
    KILN_CHECK(j.is_object(), "the file is not a JSON object");
    if (j.contains("truncation") && !j["truncation"].is_null())
      KILN_FAIL("\"truncation\" is set; Kiln does not truncate inside the tokenizer");
    t.model_ = make_model(j.value("model", nlohmann::json()));
    t.normalizer_ = make_normalizer(j.value("normalizer", nlohmann::json()));
    t.pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", nlohmann::json()));
    t.post_processor_ = make_post_processor(j.value("post_processor", nlohmann::json()));
    t.decoder_ = make_decoder(j.value("decoder", nlohmann::json()));
    t.id_to_token_ = t.model_->vocabulary();
    for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
      const bool special = a.value("special", false);
      // tokenizers' default: special tokens match the raw text, the others the normalized text.
      AddedToken added{a.at("content").get<std::string>(), read_token_id(a.at("id"), "an added token's id"),
                       special, a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false),
                       a.value("normalized", !special), ""};
      KILN_CHECK(added.id >= 0 && !added.content.empty(), "added token ", a.dump(), " has a bad id or no content");
      KILN_CHECK(size_t(added.id) < t.id_to_token_.size() + kMaxIdGap, "added token '", added.content, "' has id ",
                 added.id, ", far beyond the vocabulary's ", t.id_to_token_.size(), " tokens");
      if (size_t(added.id) >= t.id_to_token_.size()) t.id_to_token_.resize(size_t(added.id) + 1);
      t.id_to_token_[size_t(added.id)] = added.content;
      t.added_ids_[added.content] = added.id;
      t.added_.push_back(std::move(added));
    }
  } catch (const Error& e) {
    KILN_FAIL(origin, ": ", e.what());
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(origin, ": a field has the wrong type or is missing: ", e.what());
  }
  for (auto& a : t.added_)
    a.pattern = a.normalized && t.normalizer_ ? t.normalizer_->normalize(a.content, false) : a.content;
  // Longest first, so that an added token containing another wins.
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.pattern.size() > b.pattern.size(); });
  for (uint32_t k = 0; k < t.added_.size(); ++k)
    if (!t.added_[k].pattern.empty()) t.added_by_byte_[t.added_[k].normalized][uint8_t(t.added_[k].pattern[0])].push_back(k);
  t.special_.assign(t.id_to_token_.size(), false);
  for (const auto& a : t.added_) t.special_[size_t(a.id)] = a.special;
  return t;
}

namespace {

// tokenizers' word characters for single_word (\w: alphanumerics and '_').
bool word_char(uint32_t c) { return c == '_' || (c < 0x80 ? std::isalnum(int(c)) != 0 : !is_whitespace(c)); }

// Where the character that ends at `end` (> floor) starts.
size_t previous_char(const std::string& s, size_t end, size_t floor) {
  size_t start = end - 1;
  while (start > floor && (uint8_t(s[start]) & 0xc0) == 0x80) --start;
  return start;
}

}  // namespace

std::vector<HfTokenizer::Piece> HfTokenizer::split_added(const std::string& text, bool normalized_pass,
                                                         bool parse_special) const {
  std::vector<Piece> pieces;
  size_t piece_start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* match = nullptr;
    for (uint32_t k : added_by_byte_[normalized_pass][uint8_t(text[i])])
      if ((parse_special || !added_[k].special) && text.compare(i, added_[k].pattern.size(), added_[k].pattern) == 0) {
        match = &added_[k];
        break;
      }
    if (!match) {
      i += std::max<size_t>(1, utf8_char_length(text, i));
      continue;
    }
    size_t start = i, stop = i + match->pattern.size();
    if (match->single_word) {
      const bool left_ok = start == 0 || !word_char(utf8_decode_at(text, previous_char(text, start, 0)));
      const bool right_ok = stop == text.size() || !word_char(utf8_decode_at(text, stop));
      if (!left_ok || !right_ok) {  // not a word of its own: the text stays text
        i = stop;
        continue;
      }
    }
    if (match->lstrip)
      while (start > piece_start && is_whitespace(utf8_decode_at(text, previous_char(text, start, piece_start))))
        start = previous_char(text, start, piece_start);
    if (match->rstrip)
      while (stop < text.size() && utf8_char_length(text, stop) && is_whitespace(utf8_decode_at(text, stop)))
        stop += utf8_char_length(text, stop);
    if (start > piece_start) pieces.push_back({text.substr(piece_start, start - piece_start), piece_start, -1});
    pieces.push_back({"", start, match->id});
    i = piece_start = stop;
  }
  if (piece_start < text.size()) pieces.push_back({text.substr(piece_start), piece_start, -1});
  return pieces;
}

void HfTokenizer::encode_piece(const std::string& piece, bool at_text_start, bool parse_special,
                               std::vector<int32_t>& ids) const {
  const std::string normalized = normalizer_ ? normalizer_->normalize(piece, at_text_start) : piece;
  for (const Piece& p : split_added(normalized, true, parse_special)) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    std::vector<std::string> words{p.text};
    if (pre_tokenizer_) pre_tokenizer_->split(words, at_text_start && p.start == 0);
    for (const auto& w : words)
      if (!w.empty()) model_->encode_word(w, ids);
  }
}

std::vector<int32_t> HfTokenizer::encode(const std::string& raw, bool add_special_tokens, bool parse_special) const {
  // Python strings are always valid Unicode; bytes that are not UTF-8 are
  // read as U+FFFD, as Python's errors="replace" would.
  const std::string text = utf8_lossy(raw);
  std::vector<int32_t> ids;
  for (const Piece& p : split_added(text, false, parse_special)) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      encode_piece(p.text, p.start == 0, parse_special, ids);
  }
  return add_special_tokens && post_processor_ ? post_processor_->process(std::move(ids)) : ids;
}

TokenPair HfTokenizer::encode_pair(const std::string& a, const std::string& b, int64_t max_tokens) const {
  std::vector<int32_t> first = encode(a, false), second = encode(b, false);
  auto join = [&] {
    return post_processor_ ? post_processor_->process_pair(first, second) : plain_pair(first, second);
  };
  if (max_tokens > 0) {
    const int64_t added = int64_t(join().ids.size() - first.size() - second.size());
    KILN_CHECK(added < max_tokens, "a pair needs ", added, " special tokens, more than the ", max_tokens, " allowed");
    while (int64_t(first.size() + second.size()) + added > max_tokens)
      (first.size() > second.size() ? first : second).pop_back();
  }
  return join();
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    // An id past the tokenizer (a model's vocabulary padded beyond it) has
    // no text: tokenizers leaves it out, and so does Kiln.
    if ((skip_special_tokens && is_special(id)) || id < 0 || size_t(id) >= id_to_token_.size()) continue;
    tokens.push_back(id_to_token_[size_t(id)]);
  }
  if (!decoder_) {  // tokenizers joins with spaces when there is no decoder
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  std::string out;
  for (const auto& piece : decoder_->decode(std::move(tokens))) out += piece;
  return out;
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  KILN_CHECK(id >= 0 && size_t(id) < id_to_token_.size(), "token_bytes: id ", id, " is outside the vocabulary of ",
             id_to_token_.size());
  const std::string& token = id_to_token_[size_t(id)];
  if (!decoder_ || added_ids_.count(token)) return token;
  std::string out;
  for (const auto& piece : decoder_->decode({token}, /*raw=*/true)) out += piece;
  return out;
}

std::optional<int32_t> HfTokenizer::token_to_id(const std::string& token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  for (size_t id = 0; id < id_to_token_.size(); ++id)
    if (id_to_token_[id] == token) return int32_t(id);
  return std::nullopt;
}

const std::string& HfTokenizer::id_to_token(int32_t id) const {
  KILN_CHECK(id >= 0 && size_t(id) < id_to_token_.size(), "token id ", id, " is outside the tokenizer's ",
             id_to_token_.size(), " tokens");
  return id_to_token_[size_t(id)];
}

bool HfTokenizer::is_special(int32_t id) const { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }

std::string DecodeStream::step(int32_t id) {
  ids_.push_back(id);
  const std::vector<int32_t> window(ids_.begin() + long(prefix_index_), ids_.end());
  std::string text = tokenizer_.decode(window, skip_special_);
  // Hold back text until it ends in a whole character: an unfinished byte
  // sequence decodes to U+FFFD now and to its character once the rest arrives.
  if (text.size() <= prefix_.size() || text.compare(0, prefix_.size(), prefix_) != 0) return "";
  if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return "";
  std::string fresh = text.substr(prefix_.size());
  // This piece's tokens become the prefix: decoders that strip a leading
  // space (Metaspace, Strip) then see the same context as in a whole decode.
  prefix_index_ = read_index_;
  read_index_ = ids_.size();
  prefix_ = tokenizer_.decode(std::vector<int32_t>(ids_.begin() + long(prefix_index_), ids_.end()), skip_special_);
  return fresh;
}

std::string DecodeStream::flush() {
  if (read_index_ == ids_.size()) return "";
  const std::string text =
      tokenizer_.decode(std::vector<int32_t>(ids_.begin() + long(prefix_index_), ids_.end()), skip_special_);
  const bool continues = text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0;
  std::string rest = continues ? text.substr(prefix_.size()) : "";
  prefix_index_ = read_index_ = ids_.size();
  prefix_.clear();
  return rest;
}

}  // namespace kiln::text
