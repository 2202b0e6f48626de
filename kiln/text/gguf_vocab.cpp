#include "kiln/text/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/text/base64.h"
#include "kiln/text/byte_level.h"
#include "kiln/text/utf8.h"

namespace kiln::text {

using nlohmann::json;

namespace {

// GGUF's token types (llama.cpp's llama_token_type).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

const char* const kSpace = "\u2581";  // SentencePiece's visible space
constexpr size_t kLongestMergedPiece = 1024;

// The split expressions of tokenizer.ggml.pre's types, as llama.cpp's
// llm_tokenizer_bpe lists them (each splits the pieces the one before left,
// keeping the matches: tokenizers' Split with "Isolated"). Where llama.cpp
// rewrote the model's own expression for its regex engine, the model's is
// here (PCRE2 runs it). No expressions: GPT-2's, inside ByteLevel.
struct PreTokenizerType {
  std::vector<std::string> names;
  std::vector<std::string> splits;
  bool ignore_merges = false;  // a word that is a token is that token (Llama 3's and Tekken's tokenizer.json say so)
  bool add_bos = false;        // llama.cpp's default when the file does not say
};

const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}  // namespace
const std::string kGpt2Words = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
namespace {
const std::string kBloom = " ?[^(\\s|.,!?…。，、।۔،)]+";

const std::vector<PreTokenizerType>& pre_tokenizer_types() {
  static const std::vector<PreTokenizerType> types = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Words, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4"},
       {}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"},
       {kQwen2}},
      {{"qwen35"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"deepseek-llm"},
       {"[\r\n]", "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"}},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
       {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Words, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", kGpt2Words}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, R"(\p{N})"}},
      {{"seed-coder"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"tekken"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true, true},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
  return types;
}

// Token texts that end a reply wherever a vocabulary has them (llama.cpp's
// end-of-generation names), besides the file's eos/eot/eom ids.
const std::vector<std::string>& end_of_generation_names() {
  static const std::vector<std::string> names = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
      "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>",
      "<｜end▁of▁sentence｜>"};
  return names;
}

const json* find(const json& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() || it->is_null() ? nullptr : &*it;
}

template <typename T>
std::vector<T> array_of(const json& m, const std::string& key, size_t expected, bool required) {
  const json* v = find(m, key);
  if (!v) {
    KILN_CHECK(!required, "GGUF: the file lacks '", key, "', which its tokenizer needs");
    return {};
  }
  KILN_CHECK(v->is_array() && (expected == 0 || v->size() == expected), "GGUF: '", key, "' is not an array",
             expected ? " of " + std::to_string(expected) + " entries (one per token)" : std::string());
  std::vector<T> out;
  out.reserve(v->size());
  try {
    // (A value that does not fit T, a NaN or 1e300 given for an int or a
    // float, would convert undefined: it is an error here.)
    for (const auto& e : *v) {
      if constexpr (std::is_same_v<T, std::string>) {
        KILN_CHECK(e.is_string(), "GGUF: '", key, "' holds a non-string");
      } else if constexpr (std::is_integral_v<T>) {
        KILN_CHECK(e.is_number_integer(), "GGUF: '", key, "' holds a non-integer");
      } else {
        KILN_CHECK(e.is_number() && !(std::abs(e.template get<double>()) > std::numeric_limits<T>::max()), "GGUF: '",
                   key, "' holds ", e.dump(), ", not a number of its type");
      }
      out.push_back(e.template get<T>());
    }
  } catch (const json::exception&) {
    KILN_FAIL("GGUF: '", key, "' holds values of the wrong type");
  }
  return out;
}

// A token id the file names (tokenizer.ggml.bos_token_id, ...), or -1.
int32_t token_id(const json& m, const std::string& key, size_t vocab_size) {
  const json* v = find(m, key);
  if (!v) return -1;
  KILN_CHECK(v->is_number_integer() && v->get<int64_t>() >= 0, "GGUF: '", key, "' is ", v->dump(),
             ", not a token id");
  // Some converters write an id one past the vocabulary for "none" (and llama.cpp then ignores it).
  return v->get<int64_t>() < int64_t(vocab_size) ? v->get<int32_t>() : -1;
}

bool flag(const json& m, const std::string& key, bool fallback) {
  const json* v = find(m, key);
  if (!v) return fallback;
  KILN_CHECK(v->is_boolean(), "GGUF: '", key, "' is ", v->dump(), ", not true or false");
  return v->get<bool>();
}

// transformers' generate_merges: every split of every piece into two pieces
// of the vocabulary, best score first (ties: the longer left part, then the
// longer right part, then the order found), the splits of one piece ordered
// by their parts' ids.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const std::vector<std::string>& tokens,
                                                                    const std::vector<float>& scores) {
  std::unordered_map<std::string, int32_t> id;
  std::unordered_map<std::string, float> score;
  std::vector<const std::string*> order;  // first appearance, as a Python dict keeps keys
  for (size_t i = 0; i < tokens.size(); ++i) {
    id[tokens[i]] = int32_t(i);
    if (score.emplace(tokens[i], scores[i]).second) order.push_back(&tokens[i]);
    else score[tokens[i]] = scores[i];
  }
  struct Merge {
    std::string left, right;
    float score;
    int32_t left_id, right_id;
  };
  std::vector<Merge> merges;
  for (const std::string* piece : order) {
    // Every cut of a piece is looked up: a hostile file's megabyte-long piece would take hours. Real pieces are a
    // few dozen bytes; longer ones are left whole (no merge makes them).
    if (piece->size() > kLongestMergedPiece) continue;
    const size_t first = merges.size();
    for (size_t cut = 0, step; cut < piece->size() && (step = utf8_char_length(*piece, cut)) > 0;) {
      if ((cut += step) == piece->size()) break;
      const auto l = id.find(piece->substr(0, cut)), r = id.find(piece->substr(cut));
      if (l != id.end() && r != id.end()) merges.push_back({l->first, r->first, score[*piece], l->second, r->second});
    }
    std::stable_sort(merges.begin() + long(first), merges.end(), [](const Merge& a, const Merge& b) {
      return std::pair(a.left_id, a.right_id) < std::pair(b.left_id, b.right_id);
    });
  }
  // Python's sorted(..., reverse=True) keeps equal keys in their order.
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::tuple(a.score, a.left.size(), a.right.size()) > std::tuple(b.score, b.left.size(), b.right.size());
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (auto& m : merges) out.emplace_back(std::move(m.left), std::move(m.right));
  return out;
}

bool in_byte_level_alphabet(const std::string& token) {
  const auto& alphabet = byte_level_alphabet();
  for (size_t i = 0; i < token.size();) {
    const size_t n = utf8_char_length(token, i);
    if (n == 0) return false;
    const uint32_t c = utf8_decode_at(token, i);
    if (c >= alphabet.byte_of_char.size() || alphabet.byte_of_char[c] < 0) return false;
    i += n;
  }
  return true;
}

using SpecialTokens = std::vector<std::pair<std::string, int32_t>>;

// A text between `before` and `after`; a pair of texts (a reranker's query and document) as llama.cpp's server
// joins them (format_prompt_rerank): before A after between B after. Every token takes the first token type, as
// llama.cpp gives them.
json template_processing(const SpecialTokens& before, const SpecialTokens& after, const SpecialTokens& between) {
  json single = json::array(), pair = json::array(), specials = json::object();
  auto special = [&](const SpecialTokens& tokens, json& seq) {
    for (const auto& [text, id] : tokens) {
      seq.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
      specials[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
    }
  };
  auto text = [](const char* id, json& seq) { seq.push_back({{"Sequence", {{"id", id}, {"type_id", 0}}}}); };
  special(before, single), text("A", single), special(after, single);
  special(before, pair), text("A", pair), special(after, pair), special(between, pair), text("B", pair);
  special(after, pair);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

// The separator between a pair's texts where the file's add_sep_token says (llama.cpp's default where it does not).
SpecialTokens separator(const json& m, const std::vector<std::string>& tokens, int32_t sep, bool add_sep) {
  if (!flag(m, "tokenizer.ggml.add_sep_token", add_sep) || sep < 0) return {};
  return {{tokens[size_t(sep)], sep}};
}

// The bos before a text and the eos after it, as the file's add_bos_token and add_eos_token say (the vocabulary
// kind's defaults where it does not).
json bos_eos_processing(const json& m, const std::vector<std::string>& tokens, bool add_bos, bool add_eos) {
  const int32_t bos = token_id(m, "tokenizer.ggml.bos_token_id", tokens.size()),
                eos = token_id(m, "tokenizer.ggml.eos_token_id", tokens.size());
  SpecialTokens before, after;
  if (flag(m, "tokenizer.ggml.add_bos_token", add_bos) && bos >= 0) before.emplace_back(tokens[size_t(bos)], bos);
  if (flag(m, "tokenizer.ggml.add_eos_token", add_eos) && eos >= 0) after.emplace_back(tokens[size_t(eos)], eos);
  return template_processing(
      before, after, separator(m, tokens, token_id(m, "tokenizer.ggml.seperator_token_id", tokens.size()), false));
}

// SentencePiece: spaces as U+2581 (one before the text unless
// add_space_prefix is false), pieces merged by the file's merges or, without
// them, by merges recovered from the scores.
void sentencepiece_stages(const json& m, std::vector<std::string>& tokens, json& merges, bool add_space_prefix,
                          json& tokenizer) {
  // Gemma's files spell a piece of spaces with spaces, and their scores do not follow the merge order: the
  // file's order does (transformers' gemma_tokenizer).
  const json* arch = find(m, "general.architecture");
  const bool gemma = arch && arch->is_string() && arch->get<std::string>().starts_with("gemma");
  if (gemma)
    for (auto& t : tokens)
      if (t.find_first_not_of(' ') == std::string::npos) {
        std::string spelled;
        for (size_t i = 0; i < t.size(); ++i) spelled += kSpace;
        t = spelled;
      }
  if (merges.empty()) {
    std::vector<float> scores = array_of<float>(m, "tokenizer.ggml.scores", tokens.size(), false);
    if (gemma) {
      scores.resize(tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) scores[i] = -float(i);
    }
    KILN_CHECK(scores.size() == tokens.size(),
               "GGUF: a SentencePiece vocabulary without merges needs 'tokenizer.ggml.scores'");
    for (auto& [l, r] : merges_from_scores(tokens, scores)) merges.push_back({std::move(l), std::move(r)});
  }
  json normalizers = json::array();
  if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
  tokenizer["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
  tokenizer["pre_tokenizer"] = nullptr;
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
}

// Byte-level BPE: the text split by the expressions of the file's
// pre-tokenizer type, whose row (ignore_merges, add_bos) it returns.
const PreTokenizerType& byte_level_stages(const json& m, json& tokenizer) {
  const json* pre_key = find(m, "tokenizer.ggml.pre");
  const std::string pre = pre_key && pre_key->is_string() ? pre_key->get<std::string>() : "default";
  const PreTokenizerType* type = nullptr;
  for (const auto& t : pre_tokenizer_types())
    if (std::find(t.names.begin(), t.names.end(), pre) != t.names.end()) type = &t;
  KILN_CHECK(type, "GGUF: pre-tokenizer type '", pre, "' (tokenizer.ggml.pre) is not one Kiln knows; it knows the "
             "types of Llama 3, Qwen2/2.5/3, Mistral's Tekken, GPT-2, GPT-4o, DeepSeek, Falcon, StarCoder, BLOOM and "
             "others (kiln/text/gguf_vocab.cpp)");
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", type->splits.empty()}};
  json steps = json::array();
  for (const auto& split : type->splits)
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", split}}}, {"behavior", "Isolated"}, {"invert", false}});
  steps.push_back(byte_level);
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  tokenizer["decoder"] = byte_level;
  return *type;
}

// Control, unknown and user-defined tokens are matched whole in the text, as llama.cpp matches them.
bool matched_whole(int64_t type) { return type == kUnknown || type == kControl || type == kUserDefined; }
json added_token(size_t id, const std::string& content, int64_t type) {
  return {{"id", id},        {"content", content},  {"single_word", false},           {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", type != kUserDefined}};
}

// llama.cpp's WordPiece ("bert"): its converter spells a word's first piece
// with U+2581 before it and a continuation without BERT's "##" (control
// tokens as they are). Read back into BERT's own tokenizer.json: WordPiece
// under BertNormalizer (lower case and accents stripped as the file's
// tokenizer.ggml.normalizer.* say; llama.cpp's defaults: both, or neither
// lower case for its "whitespace" pre-tokenizer) and BertPreTokenizer, each
// text between [CLS] and [SEP] (a pair's with another [SEP] between unless
// add_sep_token is false).
GgufVocab wordpiece_vocab(const json& m, const std::vector<std::string>& tokens, const std::vector<int64_t>& types) {
  const size_t n = tokens.size();
  const json* pre = find(m, "tokenizer.ggml.pre");
  const bool lowercase = flag(m, "tokenizer.ggml.normalizer.lowercase", !(pre && *pre == "whitespace"));
  const bool strip_accents = flag(m, "tokenizer.ggml.normalizer.strip_accents", lowercase);
  const std::string word_start = "\xE2\x96\x81";  // U+2581
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const int64_t type = types[i];
    if (type == kUnused) continue;
    const bool whole = matched_whole(type);
    if (whole) added.push_back(added_token(i, tokens[i], type));
    const std::string bert = whole ? tokens[i]
                             : tokens[i].starts_with(word_start) ? tokens[i].substr(word_start.size())
                                                                 : "##" + tokens[i];
    if (!vocab.contains(bert)) vocab[bert] = i;  // the first of equal spellings, as llama.cpp's lookup keeps one
  }
  const int32_t unk = token_id(m, "tokenizer.ggml.unknown_token_id", n);
  KILN_CHECK(unk >= 0, "GGUF: a WordPiece vocabulary needs tokenizer.ggml.unknown_token_id");
  GgufVocab out;
  json& t = out.tokenizer;
  t["normalizer"] = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                     {"strip_accents", strip_accents}, {"lowercase", lowercase}};
  t["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  t["model"] = {{"type", "WordPiece"}, {"unk_token", tokens[size_t(unk)]}, {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 100}, {"vocab", std::move(vocab)}};
  t["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  t["added_tokens"] = std::move(added);
  int32_t cls = token_id(m, "tokenizer.ggml.cls_token_id", n), sep = token_id(m, "tokenizer.ggml.seperator_token_id", n);
  if (cls < 0) cls = token_id(m, "tokenizer.ggml.bos_token_id", n);
  if (sep < 0) sep = token_id(m, "tokenizer.ggml.eos_token_id", n);
  SpecialTokens before, after;
  if (cls >= 0) before.emplace_back(tokens[size_t(cls)], cls);
  if (sep >= 0) after.emplace_back(tokens[size_t(sep)], sep);
  t["post_processor"] = template_processing(before, after, separator(m, tokens, sep, true));
  return out;
}

// llama.cpp's Unigram ("t5": T5's and XLM-RoBERTa's SentencePiece models,
// as its converter writes them: bge-m3, multilingual-e5, nomic-embed-text
// v2). Read back as llama.cpp's UGM tokenizer runs: the precompiled
// charsmap (tokenizer.ggml.precompiled_charsmap), then with
// remove_extra_whitespaces the spaces trimmed and each run made one, spaces
// spelled U+2581 and one before the text (add_space_prefix, or always when
// spaces are merged), then Viterbi over the whole text by the pieces'
// scores (a character no piece covers is the unknown token, scored the
// lowest normal score less 10; unknowns in a row fuse).
GgufVocab unigram_vocab(const json& m, const std::vector<std::string>& tokens, const std::vector<int64_t>& types) {
  const size_t n = tokens.size();
  const std::vector<double> scores = array_of<double>(m, "tokenizer.ggml.scores", n, true);
  const int32_t unk = token_id(m, "tokenizer.ggml.unknown_token_id", n);
  KILN_CHECK(unk >= 0, "GGUF: a Unigram vocabulary needs tokenizer.ggml.unknown_token_id");
  const bool merge_spaces = flag(m, "tokenizer.ggml.remove_extra_whitespaces", false);
  const bool prefix = flag(m, "tokenizer.ggml.add_space_prefix", false) || merge_spaces;
  json normalizers = json::array();
  if (find(m, "tokenizer.ggml.precompiled_charsmap")) {
    const std::vector<int64_t> map = array_of<int64_t>(m, "tokenizer.ggml.precompiled_charsmap", 0, true);
    std::string bytes(map.size(), '\0');
    for (size_t i = 0; i < map.size(); ++i) {
      KILN_CHECK(map[i] >= -128 && map[i] <= 255, "GGUF: tokenizer.ggml.precompiled_charsmap holds ", map[i],
                 ", not a byte");
      bytes[i] = char(map[i]);
    }
    normalizers.push_back(
        {{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(bytes.data(), bytes.size())}});
  }
  if (merge_spaces) {
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", "^ +| +$"}}}, {"content", ""}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}});
  }
  GgufVocab out;
  json& t = out.tokenizer;
  t["normalizer"] = normalizers.empty() ? json() : json{{"type", "Sequence"}, {"normalizers", normalizers}};
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", kSpace},
                          {"prepend_scheme", prefix ? "always" : "never"},
                          {"split", false}};
  t["pre_tokenizer"] = metaspace;
  t["decoder"] = metaspace;
  json pieces = json::array(), added = json::array();
  bool bytes = false;
  for (size_t i = 0; i < n; ++i) {
    pieces.push_back({tokens[i], scores[i]});
    if (matched_whole(types[i])) added.push_back(added_token(i, tokens[i], types[i]));
    bytes = bytes || types[i] == kByte;
  }
  t["model"] = {{"type", "Unigram"}, {"unk_id", unk}, {"vocab", std::move(pieces)}, {"byte_fallback", bytes}};
  t["added_tokens"] = std::move(added);
  t["post_processor"] = bos_eos_processing(m, tokens, false, true);  // llama.cpp's UGM default: an eos after, no bos
  if (const int32_t eos = token_id(m, "tokenizer.ggml.eos_token_id", n); eos >= 0)
    out.end_of_generation_ids.push_back(eos);
  return out;
}

}  // namespace

std::string gguf_pre_type_of(const std::vector<std::string>& splits, bool ignore_merges) {
  for (const auto& t : pre_tokenizer_types()) {
    // GPT-2's type has no expressions of its own: ByteLevel's (kGpt2Words) split the text.
    const bool same = t.splits.empty() ? splits == std::vector<std::string>{kGpt2Words} : splits == t.splits;
    if (same && t.ignore_merges == ignore_merges) return t.names.front();
  }
  return "";
}

GgufVocab gguf_vocab(const json& m) {
  const json* model_key = find(m, "tokenizer.ggml.model");
  KILN_CHECK(model_key && model_key->is_string(), "GGUF: the file has no tokenizer (tokenizer.ggml.model); "
             "Kiln needs the vocabulary llama.cpp's converter writes into the file");
  const std::string model = model_key->get<std::string>();
  KILN_CHECK(model == "llama" || model == "gpt2" || model == "bert" || model == "t5", "GGUF: tokenizer model '", model,
             "' is not one Kiln reads from GGUF yet (it reads 'llama', SentencePiece, 'gpt2', byte-level BPE, "
             "'bert', WordPiece, and 't5', Unigram)");
  const bool sentencepiece = model == "llama";
  std::vector<std::string> tokens = array_of<std::string>(m, "tokenizer.ggml.tokens", 0, true);
  KILN_CHECK(!tokens.empty() && tokens.size() < (size_t(1) << 31), "GGUF: 'tokenizer.ggml.tokens' holds ",
             tokens.size(), " tokens");
  const size_t n = tokens.size();
  std::vector<int64_t> types = array_of<int64_t>(m, "tokenizer.ggml.token_type", n, false);
  if (types.empty()) types.assign(n, kNormal);
  for (size_t i = 0; i < n; ++i)
    KILN_CHECK(types[i] >= kNormal && types[i] <= kByte, "GGUF: token ", i, " has type ", types[i],
               ", which GGUF does not define");
  if (model == "bert") return wordpiece_vocab(m, tokens, types);
  if (model == "t5") return unigram_vocab(m, tokens, types);

  GgufVocab out;
  json bpe = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}, {"fuse_unk", sentencepiece}, {"byte_fallback", sentencepiece},
              {"ignore_merges", false}};
  json merges = json::array();
  for (const auto& merge : array_of<std::string>(m, "tokenizer.ggml.merges", 0, !sentencepiece)) {
    const size_t space = merge.find(' ', 1);  // a part may be a space itself only in SentencePiece vocabularies, which use U+2581
    KILN_CHECK(space != std::string::npos && space + 1 < merge.size(), "GGUF: merge '", merge,
               "' is not two tokens with a space between");
    merges.push_back({merge.substr(0, space), merge.substr(space + 1)});
  }
  const bool add_space_prefix = flag(m, "tokenizer.ggml.add_space_prefix", sentencepiece);
  bool add_bos = sentencepiece;
  if (sentencepiece) {
    sentencepiece_stages(m, tokens, merges, add_space_prefix, out.tokenizer);
  } else {
    const PreTokenizerType& type = byte_level_stages(m, out.tokenizer);
    bpe["ignore_merges"] = type.ignore_merges;
    add_bos = type.add_bos;
  }

  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const int64_t type = types[i];
    if (matched_whole(type)) added.push_back(added_token(i, tokens[i], type));
    // Unused ids (a vocabulary padded to the embedding's rows) are no token: none is made, and none decodes to text.
    if (type == kUnused) continue;
    // A byte-level vocabulary writes every token in its alphabet; one that is not is spelled into it.
    vocab[!sentencepiece && !in_byte_level_alphabet(tokens[i]) ? bytes_to_byte_level(tokens[i]) : tokens[i]] = i;
  }
  bpe["vocab"] = std::move(vocab);
  bpe["merges"] = std::move(merges);
  out.tokenizer["model"] = std::move(bpe);
  out.tokenizer["added_tokens"] = std::move(added);

  out.tokenizer["post_processor"] = bos_eos_processing(m, tokens, add_bos, false);

  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const int32_t id = token_id(m, key, n); id >= 0) out.end_of_generation_ids.push_back(id);
  for (size_t i = 0; i < n; ++i)
    if (types[i] == kControl || types[i] == kUserDefined)
      if (std::find(end_of_generation_names().begin(), end_of_generation_names().end(), tokens[i]) !=
          end_of_generation_names().end())
        out.end_of_generation_ids.push_back(int32_t(i));
  std::sort(out.end_of_generation_ids.begin(), out.end_of_generation_ids.end());
  out.end_of_generation_ids.erase(std::unique(out.end_of_generation_ids.begin(), out.end_of_generation_ids.end()),
                                  out.end_of_generation_ids.end());
  return out;
}

GgufChatTemplate gguf_chat_template(const json& m) {
  GgufChatTemplate out;
  for (auto [key, source] : {std::pair{"tokenizer.chat_template", &out.source},
                             {"tokenizer.chat_template.tool_use", &out.tool_use},
                             {"tokenizer.chat_template.rerank", &out.rerank}})
    if (const json* t = find(m, key)) {
      KILN_CHECK(t->is_string(), "GGUF: '", key, "' is not a string");
      *source = t->get<std::string>();
    }
  const json* tokens = find(m, "tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array()) return out;
  auto text_of = [&](const char* key) {
    const int32_t id = token_id(m, key, tokens->size());
    return id >= 0 && (*tokens)[size_t(id)].is_string() ? (*tokens)[size_t(id)].get<std::string>() : std::string();
  };
  out.bos_token = text_of("tokenizer.ggml.bos_token_id");
  out.eos_token = text_of("tokenizer.ggml.eos_token_id");
  return out;
}

}  // namespace kiln::text
