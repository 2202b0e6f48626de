// The pipeline stages of tokenizer.json that the supported families use, each
// a small class built from its JSON, found by "type" in one table per kind.
#include "kiln/text/stages.h"

#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/text/byte_level.h"
#include "kiln/text/models.h"
#include "kiln/text/precompiled.h"
#include "kiln/text/regex.h"
#include "kiln/text/unicode.h"
#include "kiln/text/utf8.h"

namespace kiln::text {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

namespace {

using nlohmann::json;

// {"String": s} or {"Regex": r}: the pattern of Replace and Split.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;
  explicit Pattern(const json& j) {
    if (j.contains("String")) {
      literal = j["String"].get<std::string>();
    } else if (j.contains("Regex")) {
      regex = std::make_shared<Regex>(j["Regex"].get<std::string>());
    } else {
      KILN_FAIL("tokenizer.json: a pattern is neither {\"String\": ...} nor {\"Regex\": ...}: ", j.dump());
    }
  }
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const {
    if (regex) return regex->find_all(s);
    std::vector<std::pair<size_t, size_t>> out;
    if (literal.empty()) return out;
    for (size_t pos = 0; (pos = s.find(literal, pos)) != std::string::npos; pos += literal.size())
      out.emplace_back(pos, pos + literal.size());
    return out;
  }
};

template <typename Stage>
using Table = std::map<std::string, std::function<std::unique_ptr<Stage>(const json&)>>;

// A "Sequence" stage: `key` lists stages of the same kind, run in order.
template <typename Sequence, typename Stage>
std::unique_ptr<Stage> build_sequence(const json& j, const char* key, std::unique_ptr<Stage> (*make)(const json&)) {
  auto sequence = std::make_unique<Sequence>();
  for (const auto& item : j.at(key))
    if (auto built = make(item)) sequence->steps.push_back(std::move(built));
  return sequence;
}

template <typename Stage>
std::unique_ptr<Stage> build(const Table<Stage>& table, const json& j, const char* kind) {
  if (j.is_null()) return nullptr;
  KILN_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "tokenizer.json: the ", kind,
             " is not an object with a \"type\"");
  const std::string type = j["type"].get<std::string>();
  auto it = table.find(type);
  if (it == table.end()) {
    std::string known;
    for (const auto& [name, _] : table) known += (known.empty() ? "" : ", ") + name;
    KILN_FAIL("tokenizer.json: ", kind, " type '", type, "' is not supported by Kiln (supported: ", known, ")");
  }
  return it->second(j);
}

// ---- normalizers

struct NormalizerSequence : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> steps;
  std::string normalize(std::string s, bool at_start) const override {
    for (const auto& n : steps) s = n->normalize(std::move(s), at_start);
    return s;
  }
};

struct Prepend : Normalizer {
  std::string prefix;
  std::string normalize(std::string s, bool) const override { return s.empty() ? s : prefix + s; }
};

struct Replace : Normalizer {
  Pattern pattern;
  std::string content;
  Replace(const json& j) : pattern(j.at("pattern")), content(j.at("content").get<std::string>()) {}
  std::string normalize(std::string s, bool) const override {
    if (!pattern.regex) return replace_all(std::move(s), pattern.literal, content);
    std::string out;
    size_t last = 0;
    for (auto [b, e] : pattern.find_all(s)) out.append(s, last, b - last).append(content), last = e;
    return out.append(s, last);
  }
};

struct Lowercase : Normalizer {
  std::string normalize(std::string s, bool) const override { return unicode_lowercase(s); }
};

struct StripAccents : Normalizer {
  std::string normalize(std::string s, bool) const override { return strip_accents(s); }
};

struct Nfd : Normalizer {
  std::string normalize(std::string s, bool) const override { return unicode_nfd(s); }
};

// NFC, NFKC and NFKD through utf8proc (Qwen's tokenizers normalize with NFC).
struct UnicodeForm : Normalizer {
  int options;
  explicit UnicodeForm(int o) : options(o) {}
  std::string normalize(std::string s, bool) const override { return unicode_normalize(s, options); }
};

struct BertNormalizer : Normalizer {
  bool clean_text, chinese, strip, lowercase;
  explicit BertNormalizer(const json& j)
      : clean_text(j.value("clean_text", true)),
        chinese(j.value("handle_chinese_chars", true)),
        lowercase(j.value("lowercase", true)) {
    // strip_accents: null means "as lowercase", as in BERT's own tokenizer.
    strip = j.contains("strip_accents") && !j["strip_accents"].is_null() ? j["strip_accents"].get<bool>() : lowercase;
  }
  std::string normalize(std::string s, bool) const override {
    if (clean_text) s = bert_clean_text(s);
    if (chinese) s = space_chinese_chars(s);
    if (strip) s = strip_accents(s);
    if (lowercase) s = unicode_lowercase(s);
    return s;
  }
};

struct StripWhitespace : Normalizer {
  bool left, right;
  std::string normalize(std::string s, bool) const override { return strip_whitespace(s, left, right); }
};

const Table<Normalizer>& normalizers() {
  static const Table<Normalizer> table = {
      {"Sequence", [](const json& j) { return build_sequence<NormalizerSequence>(j, "normalizers", make_normalizer); }},
      {"Prepend",
       [](const json& j) {
         auto p = std::make_unique<Prepend>();
         p->prefix = j.at("prepend").get<std::string>();
         return p;
       }},
      {"Replace", [](const json& j) { return std::make_unique<Replace>(j); }},
      {"Lowercase", [](const json&) { return std::make_unique<Lowercase>(); }},
      {"StripAccents", [](const json&) { return std::make_unique<StripAccents>(); }},
      {"NFD", [](const json&) { return std::make_unique<Nfd>(); }},
      {"NFC", [](const json&) { return std::make_unique<UnicodeForm>(kNfc); }},
      {"NFKC", [](const json&) { return std::make_unique<UnicodeForm>(kNfkc); }},
      {"NFKD", [](const json&) { return std::make_unique<UnicodeForm>(kNfkd); }},
      {"Precompiled", make_precompiled},
      {"BertNormalizer", [](const json& j) { return std::make_unique<BertNormalizer>(j); }},
      {"Strip",
       [](const json& j) {
         auto s = std::make_unique<StripWhitespace>();
         s->left = j.value("strip_left", true), s->right = j.value("strip_right", true);
         return s;
       }},
  };
  return table;
}

// ---- pre-tokenizers

// How a Split keeps what it matched (tokenizers' SplitDelimiterBehavior).
enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

std::vector<std::string> split_by(const std::string& s, const std::vector<std::pair<size_t, size_t>>& matches,
                                  Behavior behavior, bool invert) {
  // Spans of the text, each marked as matched (a delimiter) or not.
  std::vector<std::tuple<size_t, size_t, bool>> spans;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) spans.emplace_back(last, b, invert);
    spans.emplace_back(b, e, !invert);
    last = e;
  }
  if (last < s.size()) spans.emplace_back(last, s.size(), invert);
  std::vector<std::pair<size_t, size_t>> words;
  bool previous_was_delimiter = false;
  for (auto [b, e, delimiter] : spans) {
    switch (behavior) {
      case Behavior::removed:
        if (!delimiter) words.emplace_back(b, e);
        break;
      case Behavior::isolated:
        words.emplace_back(b, e);
        break;
      case Behavior::merged_with_previous:
        if (delimiter && !words.empty()) words.back().second = e;
        else words.emplace_back(b, e);
        break;
      case Behavior::merged_with_next:
        if (!delimiter && previous_was_delimiter && !words.empty()) words.back().second = e;
        else words.emplace_back(b, e);
        break;
      case Behavior::contiguous:
        if (delimiter && previous_was_delimiter && !words.empty()) words.back().second = e;
        else words.emplace_back(b, e);
        break;
    }
    previous_was_delimiter = delimiter;
  }
  std::vector<std::string> out;
  for (auto [b, e] : words)
    if (e > b) out.push_back(s.substr(b, e - b));
  return out;
}

// Applies `one` to each word and splices its results in place.
template <typename F>
void split_each(std::vector<std::string>& words, F one) {
  std::vector<std::string> out;
  for (auto& w : words)
    for (auto& piece : one(w)) out.push_back(std::move(piece));
  words = std::move(out);
}

struct PreTokenizerSequence : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void split(std::vector<std::string>& words, bool at_start) const override {
    for (const auto& p : steps) p->split(words, at_start);
  }
};

Behavior parse_behavior(const std::string& name) {
  static const std::map<std::string, Behavior> names = {
      {"Removed", Behavior::removed}, {"Isolated", Behavior::isolated},
      {"MergedWithPrevious", Behavior::merged_with_previous}, {"MergedWithNext", Behavior::merged_with_next},
      {"Contiguous", Behavior::contiguous}};
  auto it = names.find(name);
  KILN_CHECK(it != names.end(), "tokenizer.json: Split behavior '", name, "' is not known");
  return it->second;
}

struct Split : PreTokenizer {
  Pattern pattern;
  Behavior behavior;
  bool invert;
  explicit Split(const json& j)
      : pattern(j.at("pattern")), behavior(parse_behavior(j.at("behavior").get<std::string>())),
        invert(j.value("invert", false)) {}
  void split(std::vector<std::string>& words, bool) const override {
    split_each(words, [&](const std::string& w) { return split_by(w, pattern.find_all(w), behavior, invert); });
  }
};

// GPT-2's pattern, which ByteLevel applies when use_regex is set.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelPre : PreTokenizer {
  bool add_prefix_space;
  std::unique_ptr<Regex> regex;  // null unless use_regex
  explicit ByteLevelPre(const json& j) : add_prefix_space(j.value("add_prefix_space", false)) {
    if (j.value("use_regex", true)) regex = std::make_unique<Regex>(kGpt2Pattern);
  }
  void split(std::vector<std::string>& words, bool) const override {
    split_each(words, [&](std::string w) {
      if (add_prefix_space && (w.empty() || w[0] != ' ')) w = " " + w;
      std::vector<std::string> pieces = regex ? split_by(w, regex->find_all(w), Behavior::isolated, false)
                                              : std::vector<std::string>{w};
      for (auto& p : pieces) p = bytes_to_byte_level(p);
      return pieces;
    });
  }
};

struct Metaspace : PreTokenizer {
  std::string replacement;
  std::string prepend_scheme;  // always, first or never
  bool split_words;
  explicit Metaspace(const json& j)
      : replacement(j.value("replacement", std::string("\u2581"))), split_words(j.value("split", true)) {
    if (j.contains("prepend_scheme")) prepend_scheme = j["prepend_scheme"].get<std::string>();
    else prepend_scheme = j.value("add_prefix_space", true) ? "always" : "never";  // older files
    KILN_CHECK(prepend_scheme == "always" || prepend_scheme == "first" || prepend_scheme == "never",
               "tokenizer.json: Metaspace prepend_scheme '", prepend_scheme, "' is not known");
  }
  void split(std::vector<std::string>& words, bool at_start) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < words.size(); ++i) {
      std::string w = replace_all(words[i], " ", replacement);
      const bool prepend = prepend_scheme == "always" || (prepend_scheme == "first" && at_start && i == 0);
      if (prepend && w.rfind(replacement, 0) != 0) w = replacement + w;
      if (!split_words) {
        out.push_back(std::move(w));
        continue;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t pos = 0; (pos = w.find(replacement, pos)) != std::string::npos; pos += replacement.size())
        matches.emplace_back(pos, pos + replacement.size());
      for (auto& piece : split_by(w, matches, Behavior::merged_with_next, false)) out.push_back(std::move(piece));
    }
    words = std::move(out);
  }
};

// BERT: whitespace separates words and is dropped; each punctuation
// character is a word of its own.
struct BertPre : PreTokenizer {
  void split(std::vector<std::string>& words, bool) const override {
    split_each(words, [](const std::string& w) { return bert_pre_tokenize(w); });
  }
};

struct RegexWords : PreTokenizer {
  Regex regex;
  explicit RegexWords(const char* pattern) : regex(pattern) {}
  void split(std::vector<std::string>& words, bool) const override {
    split_each(words, [&](const std::string& w) { return split_by(w, regex.find_all(w), Behavior::removed, true); });
  }
};

struct Digits : PreTokenizer {
  Regex regex;
  bool individual;
  explicit Digits(const json& j) : regex("\\p{N}+"), individual(j.value("individual_digits", false)) {}
  void split(std::vector<std::string>& words, bool) const override {
    split_each(words, [&](const std::string& w) {
      auto matches = regex.find_all(w);
      if (individual) {
        std::vector<std::pair<size_t, size_t>> singles;
        for (auto [b, e] : matches)
          for (size_t i = b; i < e; i += std::max<size_t>(1, utf8_char_length(w, i)))
            singles.emplace_back(i, i + std::max<size_t>(1, utf8_char_length(w, i)));
        matches = std::move(singles);
      }
      return split_by(w, matches, Behavior::isolated, false);
    });
  }
};

const Table<PreTokenizer>& pre_tokenizers() {
  static const Table<PreTokenizer> table = {
      {"Sequence", [](const json& j) { return build_sequence<PreTokenizerSequence>(j, "pretokenizers", make_pre_tokenizer); }},
      {"Split", [](const json& j) { return std::make_unique<Split>(j); }},
      {"ByteLevel", [](const json& j) { return std::make_unique<ByteLevelPre>(j); }},
      {"Metaspace", [](const json& j) { return std::make_unique<Metaspace>(j); }},
      {"BertPreTokenizer", [](const json&) { return std::make_unique<BertPre>(); }},
      {"Whitespace", [](const json&) { return std::make_unique<RegexWords>(R"(\w+|[^\w\s]+)"); }},
      {"WhitespaceSplit", [](const json&) { return std::make_unique<RegexWords>(R"(\S+)"); }},
      {"Digits", [](const json& j) { return std::make_unique<Digits>(j); }},
  };
  return table;
}

// ---- post-processors

struct Passthrough : PostProcessor {  // ByteLevel: only offsets change, which Kiln does not keep
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

struct PostProcessorSequence : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> steps;
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : steps) ids = p->process(std::move(ids));
    return ids;
  }
  // The step that adds special tokens makes the pair (ByteLevel's only passes the ids on).
  TokenPair process_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b) const override {
    for (const auto& p : steps)
      if (!dynamic_cast<const Passthrough*>(p.get())) return p->process_pair(a, b);
    return plain_pair(a, b);
  }
};

// The "single" template: special tokens around sequence A; and the "pair" one: A, B and special tokens, each
// piece with its type_id.
struct Template : PostProcessor {
  std::vector<int32_t> before, after;
  struct PairItem {
    int sequence = -1;         // 0: A, 1: B, -1: special tokens
    std::vector<int32_t> ids;  // the special tokens'
    int32_t type = 0;
  };
  std::vector<PairItem> pair;
  explicit Template(const json& j) {
    const json& specials = j.value("special_tokens", json::object());
    // The ids of a SpecialToken item, looked up in special_tokens.
    auto special_ids = [&](const json& item) {
      KILN_CHECK(item.contains("SpecialToken"), "tokenizer.json: template item ", item.dump(), " is not understood");
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      KILN_CHECK(specials.contains(name), "tokenizer.json: template names special token '", name,
                 "' missing from its special_tokens");
      std::vector<int32_t> ids;
      for (const auto& id : specials[name].at("ids"))
        ids.push_back(read_token_id(id, "an id of special token '" + name + "'"));
      return ids;
    };
    if (j.contains("pair") && j["pair"].is_array())
      for (const auto& item : j["pair"]) {
        PairItem p;
        if (item.contains("Sequence")) {
          const std::string id = item["Sequence"].value("id", std::string("A"));
          KILN_CHECK(id == "A" || id == "B", "tokenizer.json: pair template names sequence '", id, "'");
          p.sequence = id == "A" ? 0 : 1;
          p.type = item["Sequence"].value("type_id", 0);
        } else {
          p.ids = special_ids(item);
          p.type = item["SpecialToken"].value("type_id", 0);
        }
        pair.push_back(std::move(p));
      }
    bool seen_sequence = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        KILN_CHECK(item["Sequence"].value("id", std::string("A")) == "A", "tokenizer.json: template names sequence ",
                   item["Sequence"].dump(), " in its single-sequence form");
        seen_sequence = true;
        continue;
      }
      std::vector<int32_t>& side = seen_sequence ? after : before;
      const std::vector<int32_t> ids = special_ids(item);
      side.insert(side.end(), ids.begin(), ids.end());
    }
  }
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out(before);
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after.begin(), after.end());
    return out;
  }
  TokenPair process_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b) const override {
    KILN_CHECK(!pair.empty(),
               "tokenizer.json: the template has no \"pair\" form, so this tokenizer does not join two "
               "texts (a cross-encoder's tokenizer does)");
    TokenPair out;
    for (const PairItem& p : pair) {
      const std::vector<int32_t>& ids = p.sequence == 0 ? a : p.sequence == 1 ? b : p.ids;
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
      out.types.insert(out.types.end(), ids.size(), p.type);
    }
    return out;
  }
};

// BertProcessing / RobertaProcessing: [CLS] A [SEP], each given as [token, id]; a pair is BERT's
// [CLS] A [SEP] B [SEP] (B's part type 1), or RoBERTa's <s> A </s> </s> B </s> (all type 0).
struct ClsSep : PostProcessor {
  int32_t cls, sep;
  bool roberta;
  ClsSep(const json& j, bool roberta)
      : cls(read_token_id(j.at("cls").at(1), "the cls id")),
        sep(read_token_id(j.at("sep").at(1), "the sep id")),
        roberta(roberta) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    ids.insert(ids.begin(), cls);
    ids.push_back(sep);
    return ids;
  }
  TokenPair process_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b) const override {
    TokenPair out;
    out.ids = process(a);
    if (roberta) out.ids.push_back(sep);
    out.types.assign(out.ids.size(), 0);
    out.ids.insert(out.ids.end(), b.begin(), b.end());
    out.ids.push_back(sep);
    out.types.resize(out.ids.size(), roberta ? 0 : 1);
    return out;
  }
};

const Table<PostProcessor>& post_processors() {
  static const Table<PostProcessor> table = {
      {"Sequence",
       [](const json& j) { return build_sequence<PostProcessorSequence>(j, "processors", make_post_processor); }},
      {"ByteLevel", [](const json&) { return std::make_unique<Passthrough>(); }},
      {"TemplateProcessing", [](const json& j) { return std::make_unique<Template>(j); }},
      {"BertProcessing", [](const json& j) { return std::make_unique<ClsSep>(j, false); }},
      {"RobertaProcessing", [](const json& j) { return std::make_unique<ClsSep>(j, true); }},
  };
  return table;
}

// ---- decoders

struct DecoderSequence : Decoder {
  std::vector<std::unique_ptr<Decoder>> steps;
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    for (const auto& d : steps) tokens = d->decode(std::move(tokens), raw);
    return tokens;
  }
};

struct ByteLevelDecoder : Decoder {
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    std::string joined;
    for (const auto& t : tokens) joined += t;
    return {raw ? byte_level_to_bytes(joined) : utf8_lossy(byte_level_to_bytes(joined))};
  }
};

struct MetaspaceDecoder : Decoder {
  std::string replacement;
  bool strip_first;
  explicit MetaspaceDecoder(const json& j) : replacement(j.value("replacement", std::string("\u2581"))) {
    strip_first = j.contains("prepend_scheme") ? j["prepend_scheme"].get<std::string>() != "never"
                                               : j.value("add_prefix_space", true);
  }
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = replace_all(std::move(tokens[i]), replacement, " ");
      if (!raw && i == 0 && strip_first && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
    }
    return tokens;
  }
};

struct ReplaceDecoder : Decoder {
  Pattern pattern;
  std::string content;
  explicit ReplaceDecoder(const json& j) : pattern(j.at("pattern")), content(j.at("content").get<std::string>()) {
    KILN_CHECK(!pattern.regex, "tokenizer.json: a Replace decoder with a regex pattern is not supported");
  }
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    for (auto& t : tokens) t = replace_all(std::move(t), pattern.literal, content);
    return tokens;
  }
};

// <0xXX> tokens become their bytes; a run of them that is not valid UTF-8
// becomes one U+FFFD per byte, as tokenizers does.
struct ByteFallbackDecoder : Decoder {
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t byte_tokens = 0;
    auto flush = [&] {
      if (byte_tokens == 0) return;
      if (raw || utf8_lossy(bytes) == bytes) out.push_back(bytes);
      else
        for (size_t k = 0; k < byte_tokens; ++k) out.push_back("\xEF\xBF\xBD");
      bytes.clear(), byte_tokens = 0;
    };
    for (auto& t : tokens) {
      unsigned value;
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>' && std::isxdigit(uint8_t(t[3])) &&
          std::isxdigit(uint8_t(t[4])) && std::sscanf(t.c_str() + 3, "%2x", &value) == 1) {
        bytes += char(value), ++byte_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    return out;
  }
};

struct FuseDecoder : Decoder {
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    std::string joined;
    for (const auto& t : tokens) joined += t;
    return {joined};
  }
};

struct StripDecoder : Decoder {
  std::string content;
  size_t start, stop;
  explicit StripDecoder(const json& j)
      : content(j.at("content").get<std::string>()), start(read_count(j, "start", 0)), stop(read_count(j, "stop", 0)) {
    KILN_CHECK(!content.empty(), "tokenizer.json: a Strip decoder has no \"content\" to strip");
  }
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    if (raw) return tokens;
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start && t.compare(b, content.size(), content) == 0 && b < e; ++k) b += content.size();
      for (size_t k = 0; k < stop && e >= b + content.size() && t.compare(e - content.size(), content.size(), content) == 0; ++k)
        e -= content.size();
      t = t.substr(b, e - b);
    }
    return tokens;
  }
};

struct WordPieceDecoder : Decoder {
  std::string prefix;
  bool cleanup;
  explicit WordPieceDecoder(const json& j)
      : prefix(j.value("prefix", std::string("##"))), cleanup(j.value("cleanup", true)) {}
  std::vector<std::string> decode(std::vector<std::string> tokens, bool raw) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) tokens[i] = tokens[i].rfind(prefix, 0) == 0 ? tokens[i].substr(prefix.size()) : " " + tokens[i];
      if (cleanup) tokens[i] = cleanup_tokenization(std::move(tokens[i]));
    }
    return tokens;
  }
  // BERT's detokenizing clean-up, as tokenizers applies it.
  static std::string cleanup_tokenization(std::string s) {
    static const std::pair<const char*, const char*> rules[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (auto [from, to] : rules) s = replace_all(std::move(s), from, to);
    return s;
  }
};

const Table<Decoder>& decoders() {
  static const Table<Decoder> table = {
      {"Sequence", [](const json& j) { return build_sequence<DecoderSequence>(j, "decoders", make_decoder); }},
      {"ByteLevel", [](const json&) { return std::make_unique<ByteLevelDecoder>(); }},
      {"Metaspace", [](const json& j) { return std::make_unique<MetaspaceDecoder>(j); }},
      {"Replace", [](const json& j) { return std::make_unique<ReplaceDecoder>(j); }},
      {"ByteFallback", [](const json&) { return std::make_unique<ByteFallbackDecoder>(); }},
      {"Fuse", [](const json&) { return std::make_unique<FuseDecoder>(); }},
      {"Strip", [](const json& j) { return std::make_unique<StripDecoder>(j); }},
      {"WordPiece", [](const json& j) { return std::make_unique<WordPieceDecoder>(j); }},
  };
  return table;
}

const Table<TokenModel>& token_models() {
  static const Table<TokenModel> table = {{"BPE", make_bpe}, {"WordPiece", make_wordpiece}, {"Unigram", make_unigram}};
  return table;
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j) { return build(normalizers(), j, "normalizer"); }
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j) { return build(pre_tokenizers(), j, "pre_tokenizer"); }
TokenPair plain_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  TokenPair out{a, std::vector<int32_t>(a.size(), 0)};
  out.ids.insert(out.ids.end(), b.begin(), b.end());
  out.types.resize(out.ids.size(), 1);
  return out;
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j) {
  return build(post_processors(), j, "post_processor");
}
std::unique_ptr<Decoder> make_decoder(const json& j) { return build(decoders(), j, "decoder"); }
std::unique_ptr<TokenModel> make_model(const json& j) {
  KILN_CHECK(!j.is_null(), "tokenizer.json has no \"model\"");
  if (!j.contains("type") && j.contains("merges")) {  // very old files leave the BPE type out
    json typed = j;
    typed["type"] = "BPE";
    return build(token_models(), typed, "model");
  }
  return build(token_models(), j, "model");
}

}  // namespace kiln::text
