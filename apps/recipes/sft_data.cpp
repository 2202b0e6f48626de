#include "apps/recipes/sft_data.h"

#include <algorithm>
#include <functional>

#include "kiln/core/error.h"
#include "kiln/io/text_file.h"

namespace kiln::recipes {

using nlohmann::json;

int64_t SftExample::learned() const { return int64_t(std::count(learn.begin(), learn.end(), uint8_t(1))); }

namespace {

std::string string_field(const json& line, const char* key) {
  const auto it = line.find(key);
  KILN_CHECK(it != line.end(), "no \"", key, "\" field");
  KILN_CHECK(it->is_string(), "\"", key, "\" must be a string, got ", it->type_name());
  return it->get<std::string>();
}

// Appends `text`'s tokens, learned or not.
void append(SftExample& e, const SftEncoding& enc, const std::string& text, bool learn, bool add_special) {
  const std::vector<int32_t> ids = enc.tokenizer->encode(text, add_special);
  e.ids.insert(e.ids.end(), ids.begin(), ids.end());
  e.learn.insert(e.learn.end(), ids.size(), uint8_t(learn));
}

void append_eos(SftExample& e, const SftEncoding& enc) {
  KILN_CHECK(enc.eos, "the model names no eos_token_id (config.json or generation_config.json), which ends text "
             "and completions; add one to config.json");
  e.ids.push_back(*enc.eos);
  e.learn.push_back(1);
}

std::vector<text::ChatMessage> messages_of(const json& list) {
  KILN_CHECK(list.is_array() && !list.empty(), "\"messages\" must be a non-empty list of {\"role\", \"content\"}");
  std::vector<text::ChatMessage> out;
  for (const json& m : list) {
    KILN_CHECK(m.is_object(), "each message must be an object {\"role\", \"content\"}, got ", m.type_name());
    out.push_back({string_field(m, "role"), string_field(m, "content")});
  }
  return out;
}

// Renders the conversation turn by turn: the text the template adds for
// each assistant turn is learned, the rest is not. Each piece is encoded
// without special tokens (the template writes them), as apply_chat_template
// encodes its text.
SftExample encode_messages(const json& list, const SftEncoding& enc) {
  KILN_CHECK(enc.chat, "\"messages\" lines need a chat template, and this model's folder has none; give one "
             "with --chat-template (kiln chat --help lists them)");
  const std::vector<text::ChatMessage> messages = messages_of(list);
  const std::string whole = enc.chat->render(messages, false);
  SftExample e;
  size_t done = 0;
  auto take = [&](size_t end, bool learn) {
    append(e, enc, whole.substr(done, end - done), learn, false);
    done = end;
  };
  bool any = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    any = true;
    const std::vector<text::ChatMessage> before(messages.begin(), messages.begin() + long(i));
    const std::vector<text::ChatMessage> through(messages.begin(), messages.begin() + long(i) + 1);
    const std::string prompt = i == 0 ? std::string() : enc.chat->render(before, true);
    const std::string turn = enc.chat->render(through, false);
    KILN_CHECK(whole.compare(0, turn.size(), turn) == 0 && turn.compare(0, prompt.size(), prompt) == 0 &&
                   prompt.size() >= done,
               "the ", enc.chat->name(), " chat template does not render this conversation turn by turn (an earlier "
               "turn renders differently once later ones follow), so its assistant turns cannot be told apart");
    take(prompt.size(), false);
    take(turn.size(), true);
  }
  KILN_CHECK(any, "the conversation has no assistant message, so there is nothing to learn");
  take(whole.size(), false);
  return e;
}

}  // namespace

SftExample encode_sft_example(const json& line, const SftEncoding& enc) {
  KILN_CHECK(line.is_object(), "a line must be a JSON object, got ", line.type_name());
  SftExample e;
  if (line.contains("messages")) {
    e = encode_messages(line["messages"], enc);
  } else if (line.contains("prompt") || line.contains("completion")) {
    append(e, enc, string_field(line, "prompt"), false, true);
    append(e, enc, string_field(line, "completion"), true, false);
    append_eos(e, enc);
  } else if (line.contains("text")) {
    append(e, enc, string_field(line, "text"), true, true);
    append_eos(e, enc);
  } else {
    KILN_FAIL("a line needs \"text\", \"prompt\" and \"completion\", or \"messages\"");
  }
  if (!e.learn.empty()) e.learn[0] = 0;  // nothing predicts the first token
  return e;
}

namespace {

// Calls f(json, line number) for each non-blank line, turning its errors into "origin:line: what".
void for_each_json_line(const std::string& text, const std::string& origin,
                        const std::function<void(const json&, int64_t)>& f) {
  size_t start = 0;
  for (int64_t number = 1; start < text.size(); ++number) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      f(json::parse(line), number);
    } catch (const std::exception& err) {
      KILN_FAIL(origin, ":", number, ": ", err.what());
    }
  }
}

}  // namespace

SftData parse_sft_lines(const std::string& text, const std::string& origin, const SftEncoding& enc) {
  KILN_CHECK(enc.tokenizer && enc.max_seq_len >= 2, "SFT data needs a tokenizer and --max-seq-len >= 2");
  SftData out;
  for_each_json_line(text, origin, [&](const json& line, int64_t) {
    SftExample e = encode_sft_example(line, enc);
    if (int64_t(e.ids.size()) > enc.max_seq_len) {
      e.ids.resize(size_t(enc.max_seq_len));
      e.learn.resize(size_t(enc.max_seq_len));
      ++out.truncated;
    }
    if (e.learned() == 0) {
      ++out.skipped;
      return;
    }
    out.examples.push_back(std::move(e));
  });
  KILN_CHECK(!out.examples.empty(), origin, " holds no example to learn from",
             out.skipped ? " (every prompt fills --max-seq-len)" : "");
  return out;
}

std::vector<LabelledText> parse_labelled_lines(const std::string& text, const std::string& origin) {
  std::vector<LabelledText> out;
  for_each_json_line(text, origin, [&](const json& line, int64_t) {
    KILN_CHECK(line.is_object(), "a line must be a JSON object {\"text\": ..., \"label\": ...}, got ",
               line.type_name());
    const auto label = line.find("label");
    KILN_CHECK(label != line.end(), "no \"label\" field");
    KILN_CHECK(label->is_string() || label->is_number_integer(), "\"label\" must be a string or an integer, got ",
               label->type_name());
    out.push_back({string_field(line, "text"), label->is_string() ? label->get<std::string>() : label->dump()});
  });
  KILN_CHECK(!out.empty(), origin, " holds no example");
  return out;
}

std::vector<LabelledText> read_labelled_file(const std::string& path) {
  return parse_labelled_lines(read_text_file(path), path);
}

SftData read_sft_file(const std::string& path, const SftEncoding& enc) {
  return parse_sft_lines(read_text_file(path), path, enc);
}

}  // namespace kiln::recipes
