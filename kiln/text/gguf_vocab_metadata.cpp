// gguf_tokenizer_metadata (kiln/text/gguf_vocab.h): a tokenizer.json as
// llama.cpp's converter writes it into a GGUF file (its _set_vocab_gpt2 for
// byte-level BPE; the "llama" vocabulary for SentencePiece-style BPE, with
// scores that make llama.cpp merge in the merges' order, and the merges).
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/text/gguf_vocab.h"

namespace kiln::text {

using nlohmann::json;

namespace {

enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

std::vector<json> steps_of(const json& stage, const char* list) {
  if (stage.is_null()) return {};
  if (stage.value("type", "") != "Sequence") return {stage};
  return stage.at(list).get<std::vector<json>>();
}

// The split expressions a pre-tokenizer applies in turn, and whether it is byte-level.
std::vector<std::string> split_expressions(const json& pre, bool& byte_level) {
  std::vector<std::string> splits;
  for (const json& step : steps_of(pre, "pretokenizers")) {
    const std::string type = step.value("type", "");
    if (type == "ByteLevel") {
      byte_level = true;
      if (step.value("use_regex", true)) splits.push_back(kGpt2Words);
    } else if (type == "Split" && step.contains("pattern") && step["pattern"].contains("Regex") &&
               step.value("behavior", "") == "Isolated" && !step.value("invert", false)) {
      splits.push_back(step["pattern"]["Regex"].get<std::string>());
    } else if (type == "Digits" && step.value("individual_digits", false)) {
      splits.push_back(R"(\p{N})");
    } else {
      KILN_FAIL("GGUF export: the tokenizer's pre-tokenizer step ", step.dump().substr(0, 120),
                " has no GGUF form (llama.cpp's byte-level types split by regular expressions)");
    }
  }
  return splits;
}

// Whether the post-processor puts a special token first (BOS) or last (EOS), and which.
int64_t framing_token(const json& post, bool first) {
  for (const json& step : steps_of(post, "processors")) {
    if (step.value("type", "") != "TemplateProcessing" || !step.contains("single") || step["single"].empty()) continue;
    const json& piece = first ? step["single"].front() : step["single"].back();
    if (!piece.contains("SpecialToken")) return -1;
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    return step.at("special_tokens").at(name).at("ids").at(0).get<int64_t>();
  }
  return -1;
}

// A SentencePiece-style tokenizer.json (spaces as U+2581, byte fallback): whether a space goes before the text,
// as the legacy normalizers (Prepend, Replace) or a Metaspace pre-tokenizer say.
bool sentencepiece_space_prefix(const json& t) {
  for (const json& step : steps_of(t.value("normalizer", json()), "normalizers"))
    if (step.value("type", "") == "Prepend") return true;
  for (const json& step : steps_of(t.value("pre_tokenizer", json()), "pretokenizers")) {
    if (step.value("type", "") != "Metaspace") continue;
    KILN_CHECK(!step.value("split", false), "GGUF export: a Metaspace pre-tokenizer that splits on spaces has no form "
               "in llama.cpp's SentencePiece tokenizer");
    return step.value("prepend_scheme", "always") != "never";
  }
  return false;
}

}  // namespace

json gguf_tokenizer_metadata(const json& t, int64_t vocab_size) {
  const json& model = t.at("model");
  KILN_CHECK(model.value("type", "") == "BPE", "GGUF export: a ", model.value("type", "?"), " tokenizer has no GGUF "
             "form Kiln writes (it writes BPE tokenizers, byte-level or SentencePiece-style)");
  const bool sentencepiece = model.value("byte_fallback", false);
  bool add_space_prefix = false;
  std::string pre = "default";
  if (sentencepiece) {
    add_space_prefix = sentencepiece_space_prefix(t);
  } else {
    bool byte_level = false;
    const std::vector<std::string> splits = split_expressions(t.value("pre_tokenizer", json()), byte_level);
    KILN_CHECK(byte_level, "GGUF export: the tokenizer is neither byte-level BPE nor SentencePiece-style (byte "
               "fallback); llama.cpp reads those two kinds");
    pre = gguf_pre_type_of(splits, model.value("ignore_merges", false));
    KILN_CHECK(!pre.empty(), "GGUF export: the tokenizer splits its text by expressions that are none of llama.cpp's "
               "pre-tokenizer types, so llama.cpp could not tokenize as it does");
  }
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto place = [&](int64_t id, const std::string& text, int64_t type) {
    KILN_CHECK(id >= 0 && id < (int64_t(1) << 24), "GGUF export: token id ", id, " is out of range");
    for (int64_t i = int64_t(tokens.size()); i <= id; ++i) tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.resize(tokens.size(), kUnused);
    tokens[size_t(id)] = text;
    types[size_t(id)] = type;
  };
  static const std::regex byte_piece("<0x[0-9A-Fa-f]{2}>");
  for (const auto& [text, id] : model.at("vocab").items())
    place(id.get<int64_t>(), text, sentencepiece && std::regex_match(text, byte_piece) ? kByte : kNormal);
  const std::string unk = model.value("unk_token", json()).is_string() ? model["unk_token"].get<std::string>() : "";
  for (const json& added : t.value("added_tokens", json::array())) {
    const std::string text = added.at("content").get<std::string>();
    place(added.at("id").get<int64_t>(), text,
          text == unk ? kUnknown : added.value("special", false) ? kControl : kUserDefined);
  }
  KILN_CHECK(int64_t(tokens.size()) <= vocab_size, "GGUF export: the tokenizer has ", tokens.size(),
             " tokens, more than the model's ", vocab_size, " embeddings");
  while (int64_t(tokens.size()) < vocab_size) place(int64_t(tokens.size()), "[PAD" + std::to_string(tokens.size()) + "]", kUnused);
  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array()))
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  json out = {{"tokenizer.ggml.model", sentencepiece ? "llama" : "gpt2"}, {"tokenizer.ggml.pre", pre},
              {"tokenizer.ggml.tokens", tokens}, {"tokenizer.ggml.token_type", types},
              {"tokenizer.ggml.merges", merges}};
  if (sentencepiece) {
    // llama.cpp's SentencePiece merges the adjacent pair whose union scores highest: a piece's score is minus the
    // rank of the merge that makes it, so it merges in the merges' order (pieces no merge makes score 0).
    std::vector<float> scores(tokens.size(), 0.0f);
    std::unordered_map<std::string, int64_t> id_of;
    for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], int64_t(i));
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const size_t space = merges[rank].find(' ');
      const auto it = id_of.find(merges[rank].substr(0, space) + merges[rank].substr(space + 1));
      if (it != id_of.end() && scores[size_t(it->second)] == 0) scores[size_t(it->second)] = -float(rank + 1);
    }
    out["tokenizer.ggml.scores"] = scores;
    out["tokenizer.ggml.add_space_prefix"] = add_space_prefix;
    if (!unk.empty() && id_of.contains(unk)) out["tokenizer.ggml.unknown_token_id"] = id_of[unk];
  }
  const json post = t.value("post_processor", json());
  const int64_t bos = framing_token(post, true), eos = framing_token(post, false);
  out["tokenizer.ggml.add_bos_token"] = bos >= 0;
  if (bos >= 0) out["tokenizer.ggml.bos_token_id"] = bos;
  if (eos >= 0 && eos != bos) out["tokenizer.ggml.add_eos_token"] = true;
  return out;
}

}  // namespace kiln::text
