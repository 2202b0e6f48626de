// Supervised fine-tuning data: JSON Lines, one example a line, in the three
// formats TRL's SFTTrainer takes:
//   {"text": ...}                              plain language modelling
//   {"prompt": ..., "completion": ...}         the loss counts the completion
//   {"messages": [{"role", "content"}, ...]}   the loss counts the assistant turns
// Text and completions end with the eos token (as TRL appends it); a
// conversation is rendered by the model's chat template, each assistant turn
// (with the template's end of turn) learned and everything else not.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/text/chat_template.h"
#include "kiln/text/hf_tokenizer.h"

namespace kiln::recipes {

// One example: its tokens, and which of them the loss counts (each is
// predicted from the tokens before it, so ids[0] never counts).
struct SftExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> learn;
  int64_t learned() const;
};

struct SftEncoding {
  const text::HfTokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat = nullptr;  // null: "messages" lines are refused, saying why
  std::optional<int32_t> eos;                 // appended to text and completions
  int64_t max_seq_len = 1024;                 // longer examples are cut (their tail is lost)
};

// One line's example; throws kiln::Error saying what is wrong with it.
SftExample encode_sft_example(const nlohmann::json& line, const SftEncoding& encoding);

struct SftData {
  std::vector<SftExample> examples;
  int64_t truncated = 0;  // examples cut to max_seq_len
  int64_t skipped = 0;    // examples left with nothing to learn (a prompt as long as max_seq_len)
};
// Reads a JSON Lines file; a bad line is an error naming the file, the line
// number and what is wrong. Empty lines are skipped.
SftData read_sft_file(const std::string& path, const SftEncoding& encoding);
// The same over text already read (the fuzzer's entry point); `origin` names it in errors.
SftData parse_sft_lines(const std::string& text, const std::string& origin, const SftEncoding& encoding);

// Classification data (kiln train classify): {"text": ..., "label": ...} a
// line, the label a string or an integer (taken as its decimal text). A bad
// line is an error naming the file, the line number and what is wrong.
struct LabelledText {
  std::string text, label;
};
std::vector<LabelledText> parse_labelled_lines(const std::string& text, const std::string& origin);
std::vector<LabelledText> read_labelled_file(const std::string& path);

}  // namespace kiln::recipes
