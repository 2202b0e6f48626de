#include "apps/serve/requests.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "apps/serve/request_fields.h"
#include "kiln/core/error.h"
#include "kiln/text/grammar/json_grammar.h"
#include "kiln/text/grammar/json_schema.h"

namespace kiln::serve {

namespace {

using json = nlohmann::ordered_json;  // (request_fields.h: in key order, as sent)

bool is_one(const json& v) { return v == 1; }
bool is_zero(const json& v) { return v == 0; }
bool is_false(const json& v) { return v == false; }
bool is_minus_one(const json& v) { return v == -1; }
bool is_empty(const json& v) { return v.is_string() ? v.get_ref<const std::string&>().empty() : v == json::object(); }

// OpenAI's /v1/completions fields that Kiln does not implement. Each is
// accepted only at the value that asks for nothing (OpenAI's default), so no
// client silently gets something other than what it asked for.
struct UnsupportedField {
  const char* name;
  bool (*asks_nothing)(const json&);
  const char* instead;
};
const UnsupportedField kUnsupportedCompletionFields[] = {
    {"best_of", is_one, "Kiln does not rank candidates: leave it at 1"},
    {"suffix", is_empty, "insertion (text after the completion) is not implemented"},
};
// Every other field it reads: OpenAI's that it implements ("user" only names
// the caller, which changes nothing), and llama-server's top_k and ignore_eos.
// llama-server's grammar too, and OpenAI's response_format (JSON mode).
const char* const kCompletionFields[] = {"model", "prompt", "n", "max_tokens", "temperature", "top_p", "top_k",
                                         "seed", "stop", "stream", "ignore_eos", "user", "echo", "logprobs",
                                         "stream_options", "grammar", "json_schema", "response_format"};
// Both endpoints' samplers, penalties and biases beyond those (docs/SAMPLING.md).
const char* const kSamplingFields[] = {"min_p",           "repetition_penalty", "repeat_penalty", "repeat_last_n",
                                       "presence_penalty", "frequency_penalty", "logit_bias"};

const char* const kChatFields[] = {"model", "messages", "n", "max_tokens", "max_completion_tokens", "temperature",
                                   "top_p", "top_k", "seed", "stop", "stream", "user", "ignore_eos", "logprobs",
                                   "top_logprobs", "stream_options", "grammar", "json_schema", "response_format",
                                   "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                                   "reasoning_format"};

// Drops null fields (how clients spell "the default": OpenAI's schema allows
// it for every optional one), then refuses a field that is unknown, or known
// but not implemented and set to ask for something.
void check_fields(json& body, std::span<const char* const> known, std::span<const UnsupportedField> unsupported,
                  const std::string& endpoint) {
  for (auto it = body.begin(); it != body.end();) it = it->is_null() ? body.erase(it) : std::next(it);
  for (auto field = body.begin(); field != body.end(); ++field) {
    const std::string& name = field.key();
    auto named = [&](const char* k) { return name == k; };
    if (std::any_of(known.begin(), known.end(), named) ||
        std::any_of(std::begin(kSamplingFields), std::end(kSamplingFields), named))
      continue;
    const auto it =
        std::find_if(unsupported.begin(), unsupported.end(), [&](const UnsupportedField& f) { return name == f.name; });
    if (it == unsupported.end())
      throw HttpError(400, "unknown field '" + name + "' (see docs/SERVING.md for the fields " + endpoint + " takes)");
    if (!it->asks_nothing(field.value()))
      throw HttpError(400, "field '" + name + "' is not supported: " + it->instead);
  }
}

// Constrained decoding: llama-server's `grammar` (GBNF) or `json_schema`, or
// OpenAI's response_format (JSON mode, or a JSON schema). One at a time.
void parse_constraint(const json& body, GenerationFields& r) {
  auto set = [&](std::shared_ptr<const text::Grammar> g) {
    if (r.grammar)
      throw HttpError(400, "'grammar', 'json_schema' and a JSON response_format are constraints: send one");
    r.grammar = std::move(g);
  };
  if (body.contains("grammar")) {
    const std::string gbnf = field<std::string>(body, "grammar", "a GBNF grammar (a string)");
    try {
      set(std::make_shared<const text::Grammar>(text::parse_gbnf(gbnf)));
    } catch (const Error& e) {
      throw HttpError(400, std::string("field 'grammar': ") + e.what());
    }
  }
  if (body.contains("json_schema")) try {
      set(text::json_schema_grammar(body["json_schema"]));
    } catch (const Error& e) {
      throw HttpError(400, std::string("field 'json_schema': ") + e.what());
    }
  if (!body.contains("response_format")) return;
  try {
    if (auto grammar = text::response_format_grammar(body["response_format"])) set(std::move(grammar));
  } catch (const Error& e) {
    throw HttpError(400, e.what());
  }
}

template <typename T>
std::optional<T> optional_field(const json& body, const std::string& key, const char* type) {
  if (!body.contains(key)) return std::nullopt;
  return field<T>(body, key, type);
}

// Token ids as a client sends them: an array of at most 1M integers in [0, 2^31).
bool are_token_ids(const json& ids) {
  return ids.is_array() && ids.size() <= 1000000 && std::all_of(ids.begin(), ids.end(), [](const json& v) {
           return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t(1) << 31);
         });
}

// The sampling fields the request sets, each checked where it is read.
void parse_sampling(const json& body, models::SamplingFields& s) {
  auto number = [&](const char* key, auto valid, const char* range) {
    const std::optional<double> v = optional_field<double>(body, key, "a number");
    if (v && !valid(*v)) throw HttpError(400, std::string(key) + " must be " + range);
    return v;
  };
  s.temperature = number("temperature", [](double v) { return v >= 0; }, ">= 0 (0: greedy)");
  s.top_p = number("top_p", [](double v) { return v > 0 && v <= 1; }, "in (0, 1]");
  s.min_p = number("min_p", [](double v) { return v >= 0 && v <= 1; }, "in [0, 1] (0: off)");
  auto penalty_range = [](double v) { return v > 0 && v <= 1e6; };
  s.repetition_penalty = number("repetition_penalty", penalty_range, "> 0 (1: off)");
  if (const auto llama = number("repeat_penalty", penalty_range, "> 0 (1: off)")) {
    if (s.repetition_penalty) throw HttpError(400, "'repetition_penalty' and 'repeat_penalty' are one setting: send one");
    s.repetition_penalty = llama;
  }
  auto openai_range = [](double v) { return v >= -2 && v <= 2; };  // OpenAI's
  s.presence_penalty = number("presence_penalty", openai_range, "in [-2, 2]");
  s.frequency_penalty = number("frequency_penalty", openai_range, "in [-2, 2]");
  s.top_k = optional_field<int64_t>(body, "top_k", "an integer");
  if (s.top_k && *s.top_k < 0) throw HttpError(400, "top_k must be >= 0 (0: all)");
  s.repetition_window = optional_field<int64_t>(body, "repeat_last_n", "an integer");
  if (s.repetition_window && *s.repetition_window < -1)
    throw HttpError(400, "repeat_last_n must be -1 (every token), 0 (off) or the tokens to look back at");
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& body) {
  std::vector<std::pair<int32_t, float>> bias;
  if (!body.contains("logit_bias")) return bias;
  const json& b = body["logit_bias"];
  if (!b.is_object()) throw HttpError(400, "'logit_bias' must be an object of token ids and biases");
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& id = it.key();
    int32_t token = -1;
    const auto [end, error] = std::from_chars(id.data(), id.data() + id.size(), token);
    if (error != std::errc() || end != id.data() + id.size() || token < 0)
      throw HttpError(400, "logit_bias: '" + id + "' is not a token id (a non-negative integer)");
    if (!it->is_number() || !(std::abs(it->get<double>()) <= 100))
      throw HttpError(400, "logit_bias: the bias of token " + id + " must be a number in [-100, 100]");
    bias.emplace_back(token, it->get<float>());
  }
  return bias;
}

void parse_generation(const json& body, GenerationFields& r) {
  r.model = field<std::string>(body, "model", "a string");
  parse_sampling(body, r.sampling);
  r.logit_bias = parse_logit_bias(body);
  r.seed = field<uint64_t>(body, "seed", "a non-negative integer", uint64_t(1));
  r.n = field<int64_t>(body, "n", "an integer", int64_t(1));
  if (r.n < 1 || r.n > kMaxChoices) throw HttpError(400, "n must be in [1, " + std::to_string(kMaxChoices) + "]");
  if (body.contains("stop") && body["stop"].is_string())
    r.stop = {body["stop"].get<std::string>()};
  else
    r.stop = field<std::vector<std::string>>(body, "stop", "a string or an array of strings", std::vector<std::string>{});
  r.stream = field<bool>(body, "stream", "true or false", false);
  r.ignore_eos = field<bool>(body, "ignore_eos", "true or false", false);
  if (body.contains("stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) throw HttpError(400, "'stream_options' must be an object");
    for (auto key = so.begin(); key != so.end(); ++key)
      if (key.key() != "include_usage") throw HttpError(400, "unknown field 'stream_options." + key.key() + "'");
    r.include_usage = field<bool>(so, "include_usage", "true or false", false);
    if (!r.stream && r.include_usage) throw HttpError(400, "stream_options.include_usage is for streamed answers");
  }
  parse_constraint(body, r);
}

// A message's content: a string, or OpenAI's array of text parts.
std::string message_content(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    throw HttpError(400, where + ".content must be a string or an array of text parts");
  std::string text;
  for (const auto& part : c) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw HttpError(400, where + ".content: only parts of type 'text' with a 'text' string are supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

bool is_function_name(const json& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(uint8_t(c)) || c == '_' || c == '-';
  });
}

// An assistant's tool_calls, checked: arguments as sent (JSON text, or an
// object), which the model's template takes in its own form
// (text::arguments_as_taken).
json tool_calls_of(const json& calls, const std::string& where) {
  if (!calls.is_array()) throw HttpError(400, where + ".tool_calls must be an array");
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& call = calls[i];
    const std::string at = where + ".tool_calls[" + std::to_string(i) + "]";
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      throw HttpError(400, at + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    if (call.contains("type") && call["type"] != "function") throw HttpError(400, at + ".type must be \"function\"");
    const json& function = call["function"];
    if (!function.contains("name") || !function["name"].is_string())
      throw HttpError(400, at + ".function.name must be a string");
    json arguments = json::object();
    if (function.contains("arguments")) {
      arguments = function["arguments"];
      if (!arguments.is_string() && !arguments.is_object())
        throw HttpError(400, at + ".function.arguments must be a string (JSON text)");
    }
    json copy = {{"type", "function"}};
    if (call.contains("id")) {
      if (!call["id"].is_string()) throw HttpError(400, at + ".id must be a string");
      copy["id"] = call["id"];
    }
    copy["function"] = {{"name", function["name"]}, {"arguments", arguments}};
    out.push_back(std::move(copy));
  }
  return out;
}

// The fields a message may carry, by role (refusal, audio... only as null, dropped before).
const std::vector<std::pair<std::string, std::vector<std::string>>> kMessageFields = {
    {"system", {"role", "content", "name"}},
    {"user", {"role", "content", "name"}},
    {"assistant", {"role", "content", "name", "tool_calls", "reasoning_content", "reasoning"}},
    {"tool", {"role", "content", "tool_call_id", "name"}},
};

json parse_messages(const json& body) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    throw HttpError(400, "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  json messages = json::array();
  for (const auto& given : body["messages"]) {
    const std::string where = "messages[" + std::to_string(messages.size()) + "]";
    if (!given.is_object()) throw HttpError(400, where + " is not an object");
    json m = given;
    for (auto it = m.begin(); it != m.end();) it = it->is_null() ? m.erase(it) : std::next(it);
    if (!m.contains("role") || !m["role"].is_string()) throw HttpError(400, where + " has no 'role' string");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    const auto fields = std::find_if(kMessageFields.begin(), kMessageFields.end(),
                                     [&](const auto& f) { return f.first == role; });
    if (fields == kMessageFields.end())
      throw HttpError(400, where + ".role is '" + role + "': Kiln takes system, developer, user, assistant and tool");
    json out = {{"role", role}};
    for (auto key = m.begin(); key != m.end(); ++key) {
      if (std::find(fields->second.begin(), fields->second.end(), key.key()) == fields->second.end())
        throw HttpError(400, where + ": field '" + key.key() + "' is not supported in a " + role + " message");
      if (key.key() == "role") continue;
      if (key.key() == "content")
        out["content"] = message_content(key.value(), where);
      else if (key.key() == "tool_calls")
        out["tool_calls"] = tool_calls_of(key.value(), where);
      else if (!key.value().is_string())
        throw HttpError(400, where + "." + key.key() + " must be a string");
      else
        out[key.key()] = key.value().get<std::string>();
    }
    if (!out.contains("content") && !out.contains("tool_calls")) throw HttpError(400, where + " has no 'content'");
    if (role == "tool" && !out.contains("tool_call_id"))
      throw HttpError(400, where + ": a tool message needs the 'tool_call_id' of the call it answers");
    messages.push_back(std::move(out));
  }
  return messages;
}

constexpr size_t kMaxTools = 128;  // OpenAI's limit

// OpenAI's tools, tool_choice and parallel_tool_calls.
void parse_tools(const json& body, ChatRequest& r) {
  if (body.contains("tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array() || tools.size() > kMaxTools)
      throw HttpError(400, "'tools' must be an array of at most " + std::to_string(kMaxTools) + " functions");
    std::vector<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
          !t["function"].is_object())
        throw HttpError(400, where + " must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"...}}");
      const json& f = t["function"];
      if (!f.contains("name") || !is_function_name(f["name"]))
        throw HttpError(400, where + ".function.name must be 1 to 64 letters, digits, _ or -");
      if (f.contains("parameters") && !f["parameters"].is_object())
        throw HttpError(400, where + ".function.parameters must be a JSON schema object");
      if (f.contains("description") && !f["description"].is_string())
        throw HttpError(400, where + ".function.description must be a string");
      const std::string name = f["name"];
      if (std::find(names.begin(), names.end(), name) != names.end())
        throw HttpError(400, where + ": a second function named '" + name + "'");
      names.push_back(name);
    }
    if (!tools.empty()) r.tools = tools;
  }
  r.parallel_tool_calls = field<bool>(body, "parallel_tool_calls", "true or false", true);
  try {
    r.tool_choice = text::tool_choice_from_json(body.value("tool_choice", json()), r.tools);
  } catch (const Error& e) {
    throw HttpError(400, e.what());
  }
  using Mode = text::ToolChoice::Mode;
  if (r.grammar && (r.tool_choice.mode == Mode::kRequired || r.tool_choice.mode == Mode::kNamed))
    throw HttpError(400, "tool_choice '" + std::string(r.tool_choice.mode == Mode::kNamed ? "function" : "required") +
                             "' constrains the answer to a tool call: it cannot take a grammar or response_format too");
}

// chat_template_kwargs and reasoning_format.
void parse_reasoning(const json& body, ChatRequest& r) {
  if (body.contains("chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object())
      throw HttpError(400, "'chat_template_kwargs' must be an object of template variables, e.g. {\"enable_thinking\": false}");
    for (const auto& [key, value] : body["chat_template_kwargs"].items()) {
      for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "documents"})
        if (key == reserved)
          throw HttpError(400, "chat_template_kwargs: '" + key + "' is set by the request itself, not a template variable");
      r.template_kwargs[key] = value;
    }
  }
  const std::string format = field<std::string>(body, "reasoning_format", "\"auto\", \"deepseek\" or \"none\"", "auto");
  if (format != "auto" && format != "deepseek" && format != "none")
    throw HttpError(400, "reasoning_format is '" + format + "': Kiln takes auto, deepseek (both: thinking in "
                         "reasoning_content) or none (thinking left in content)");
  r.split_reasoning = format != "none";
}

}  // namespace

CompletionRequest parse_completion(const std::string& text) {
  json body = parse_object(text);
  check_fields(body, kCompletionFields, kUnsupportedCompletionFields, "/v1/completions");
  CompletionRequest r;
  parse_generation(body, r);
  const json prompt = body.value("prompt", json(""));
  const auto all_strings = [](const json& a) {
    return std::all_of(a.begin(), a.end(), [](const json& v) { return v.is_string(); });
  };
  if (prompt.is_array() && !prompt.empty() && prompt[0].is_string()) {  // a batch of prompts
    if (!all_strings(prompt) || int64_t(prompt.size()) > kMaxPrompts)
      throw HttpError(400,
                      "field 'prompt' as a batch must be an array of 1 to " + std::to_string(kMaxPrompts) + " strings");
    r.prompts = prompt.get<std::vector<std::string>>();
  } else if (prompt.is_array()) {  // token ids, or a batch of them, as lm-evaluation-harness sends them
    const bool batch = !prompt.empty() && prompt[0].is_array();
    const json rows = batch ? prompt : json::array({prompt});
    if (rows.empty() || int64_t(rows.size()) > kMaxPrompts ||
        !std::all_of(rows.begin(), rows.end(), [](const json& ids) { return !ids.empty() && are_token_ids(ids); }))
      throw HttpError(400,
                      "field 'prompt' must be a string, an array of strings, a non-empty array of token ids "
                      "(non-negative integers), or an array of 1 to " +
                          std::to_string(kMaxPrompts) + " of those");
    for (const json& ids : rows) r.prompt_ids.push_back(ids.get<std::vector<int32_t>>());
    r.prompts.clear();
  } else {
    r.prompts = {
        field<std::string>(body, "prompt", "a string, an array of strings or an array of token ids", std::string())};
  }
  r.echo = field<bool>(body, "echo", "true or false", false);
  if (body.contains("logprobs")) r.logprobs = field<int64_t>(body, "logprobs", "an integer");
  r.max_tokens = field<int64_t>(body, "max_tokens", "an integer", int64_t(16));
  if (r.max_tokens < 0 || r.max_tokens > 4096) throw HttpError(400, "max_tokens must be in [0, 4096]");
  if (r.logprobs && (*r.logprobs < 0 || *r.logprobs > 20)) throw HttpError(400, "logprobs must be in [0, 20]");
  if (r.echo && r.stream) throw HttpError(400, "echo (the prompt's log-probabilities) is not streamed");
  if (r.echo && r.n > 1) throw HttpError(400, "echo answers one choice a prompt: leave n at 1");
  return r;
}

ChatRequest parse_chat(const std::string& text) {
  json body = parse_object(text);
  check_fields(body, kChatFields, {}, "/v1/chat/completions");
  ChatRequest r;
  parse_generation(body, r);
  r.messages = parse_messages(body);
  parse_tools(body, r);
  // max_completion_tokens is OpenAI's newer name; either bounds the answer.
  if (body.contains("max_tokens") && body.contains("max_completion_tokens") &&
      body["max_tokens"] != body["max_completion_tokens"])
    throw HttpError(400, "max_tokens and max_completion_tokens disagree: send one");
  r.max_tokens = field<int64_t>(body, body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                                "an integer", r.max_tokens);
  r.logprobs = field<bool>(body, "logprobs", "true or false", false);
  r.top_logprobs = field<int64_t>(body, "top_logprobs", "an integer", int64_t(0));
  if (r.max_tokens < 1 || r.max_tokens > 4096) throw HttpError(400, "max_tokens must be in [1, 4096]");
  if (r.top_logprobs < 0 || r.top_logprobs > 20) throw HttpError(400, "top_logprobs must be in [0, 20]");
  if (r.top_logprobs > 0 && !r.logprobs) throw HttpError(400, "top_logprobs needs logprobs: true");
  parse_reasoning(body, r);
  return r;
}

// llama-server's /completion fields that Kiln reads beyond the generation
// ones (cache_prompt and n_keep only tune its cache: nothing to do here),
// and its samplers and outputs that Kiln has not, accepted only when off.
const char* const kLlamaCompletionFields[] = {
    "model",   "prompt",   "n_predict",        "temperature",     "top_k",       "top_p",          "seed",
    "stop",    "stream",   "ignore_eos",       "grammar",         "json_schema", "cache_prompt",   "n_keep",
    "n_probs", "n_indent", "t_max_predict_ms", "t_max_prompt_ms", "samplers",    "response_fields"};
const UnsupportedField kUnsupportedLlamaCompletionFields[] = {
    {"mirostat", is_zero, "Kiln has no mirostat sampler"},
    {"typical_p", is_one, "Kiln has no locally typical sampler"},
    {"xtc_probability", is_zero, "Kiln has no XTC sampler"},
    {"dry_multiplier", is_zero, "Kiln has no DRY sampler"},
    {"dynatemp_range", is_zero, "Kiln has no dynamic temperature"},
    {"top_n_sigma", is_minus_one, "Kiln has no top-n-sigma sampler"},
    {"id_slot", is_minus_one, "Kiln has no slots to choose"},
    {"return_tokens", is_false, "the answer is text"},
    {"post_sampling_probs", is_false, "n_probs gives the model's probabilities before sampling"},
    {"timings_per_token", is_false, "Kiln reports no timings"},
};

CompletionRequest parse_llama_completion(const std::string& text) {
  json body = parse_object(text);
  check_fields(body, kLlamaCompletionFields, kUnsupportedLlamaCompletionFields, "/completion");
  if (!body.contains("model")) body["model"] = "";  // the one language model served
  // seed -1 (llama-server's default) draws one.
  if (!body.contains("seed") || body["seed"] == -1)
    body["seed"] = uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  CompletionRequest r;
  parse_generation(body, r);
  if (body.contains("prompt") && !body["prompt"].is_string())
    throw HttpError(400, "field 'prompt' must be a string (token-id prompts on /completion are not supported)");
  r.prompts = {field<std::string>(body, "prompt", "a string")};
  r.max_tokens = field<int64_t>(body, "n_predict", "an integer", int64_t(-1));
  if (r.max_tokens == -1) r.max_tokens = 4096;
  if (r.max_tokens < 0 || r.max_tokens > 4096) throw HttpError(400, "n_predict must be -1 or in [0, 4096]");
  field<bool>(body, "cache_prompt", "true or false", true);
  field<int64_t>(body, "n_keep", "an integer", int64_t(0));
  const int64_t n_probs = field<int64_t>(body, "n_probs", "an integer", int64_t(0));
  if (n_probs < 0 || n_probs > 20) throw HttpError(400, "n_probs must be in [0, 20]");
  if (n_probs > 0) r.logprobs = n_probs;  // each token's, with the n_probs most likely (completion_probabilities)
  r.n_indent = field<int64_t>(body, "n_indent", "an integer", int64_t(0));
  if (r.n_indent < 0) throw HttpError(400, "n_indent must be 0 or more");
  r.t_max_predict_ms = field<int64_t>(body, "t_max_predict_ms", "an integer", int64_t(0));
  field<int64_t>(body, "t_max_prompt_ms", "an integer", int64_t(0));  // (llama-server reads it to no effect)
  auto names = [&](const char* key) {
    const json& list = body.contains(key) ? body[key] : json::array();
    if (!list.is_array() || list.size() > 64 ||
        !std::all_of(list.begin(), list.end(), [](const json& n) { return n.is_string(); }))
      throw HttpError(400, std::string("field '") + key + "' must be an array of up to 64 strings");
    return list.get<std::vector<std::string>>();
  };
  r.samplers = names("samplers");
  for (const std::string& name : r.samplers)
    if (!models::is_chain_sampler(name))
      throw HttpError(400, "'samplers' names '" + name +
                               "'; Kiln runs top_k, top_p, min_p, temperature and "
                               "infill (and passes penalties, dry, typ_p, xtc and top_n_sigma, which are off)");
  r.response_fields = names("response_fields");
  return r;
}

InfillRequest parse_llama_infill(const std::string& text) {
  json body = parse_object(text);
  InfillRequest r;
  auto take_text = [&](const char* key) {
    const std::string value =
        field<std::string>(body, key, "a string (token-id parts are not supported)", std::string());
    body.erase(key);
    return value;
  };
  r.prefix = take_text("input_prefix");
  r.suffix = take_text("input_suffix");
  if (body.contains("input_extra") && !body["input_extra"].is_null()) {
    const json& extra = body["input_extra"];
    if (!extra.is_array() || int64_t(extra.size()) > kMaxInfillChunks)
      throw HttpError(400, "field 'input_extra' must be an array of up to " + std::to_string(kMaxInfillChunks) +
                               " {\"text\", \"filename\"} chunks");
    for (const json& chunk : extra) {
      if (!chunk.is_object() || !chunk.value("text", json("")).is_string() ||
          !chunk.value("filename", json("")).is_string())
        throw HttpError(400, "each of 'input_extra' must be {\"text\": string, \"filename\": string}");
      r.extra.push_back({chunk.value("text", std::string()), chunk.value("filename", std::string("tmp"))});
    }
  }
  body.erase("input_extra");
  if (!body.contains("prompt")) body["prompt"] = "";  // (the start of the middle, if any)
  static_cast<CompletionRequest&>(r) = parse_llama_completion(body.dump());
  r.n_predict = body.value("n_predict", int64_t(-1));  // (an integer: its parser has checked it)
  return r;
}

TokenizeRequest parse_tokenize(const std::string& text) {
  static const char* const kFields[] = {"model", "content", "prompt", "messages", "tools", "chat_template_kwargs",
                                        "add_special", "add_special_tokens", "add_generation_prompt", "with_pieces",
                                        "parse_special"};
  json body = parse_object(text);
  check_fields(body, kFields, {}, "/tokenize");
  TokenizeRequest r;
  r.model = field<std::string>(body, "model", "a string", std::string());
  const int given = int(body.contains("content")) + int(body.contains("prompt")) + int(body.contains("messages"));
  if (given != 1)
    throw HttpError(400,
                    "send the text as 'content' (llama-server's name) or 'prompt' (vLLM's), or a conversation "
                    "as 'messages': one of them");
  if (body.contains("add_special") && body.contains("add_special_tokens"))
    throw HttpError(400, "'add_special' and 'add_special_tokens' are one setting: send one");
  const char* add_key = body.contains("add_special") ? "add_special" : "add_special_tokens";
  if (body.contains("messages")) {
    json chat = {{"model", r.model}, {"messages", body["messages"]}};
    for (const char* key : {"tools", "chat_template_kwargs"})
      if (body.contains(key)) chat[key] = body[key];
    r.chat = parse_chat(chat.dump());
    if (!field<bool>(body, "add_generation_prompt", "true or false", true))
      throw HttpError(400, "add_generation_prompt false is not supported: a conversation is rendered as a prompt");
    r.add_special = field<bool>(body, add_key, "true or false", false);  // vLLM's default for a conversation
  } else {
    const bool llama = body.contains("content");
    r.text = field<std::string>(body, llama ? "content" : "prompt", "a string");
    r.add_special = field<bool>(body, add_key, "true or false", !llama);  // llama-server's default, and vLLM's
    if (body.contains("add_generation_prompt")) throw HttpError(400, "add_generation_prompt goes with 'messages'");
  }
  r.with_pieces = field<bool>(body, "with_pieces", "true or false", false);
  r.parse_special = field<bool>(body, "parse_special", "true or false", true);
  return r;
}

DetokenizeRequest parse_detokenize(const std::string& text) {
  static const char* const kFields[] = {"model", "tokens"};
  json body = parse_object(text);
  check_fields(body, kFields, {}, "/detokenize");
  DetokenizeRequest r;
  r.model = field<std::string>(body, "model", "a string", std::string());
  if (!body.contains("tokens") || !are_token_ids(body["tokens"]))
    throw HttpError(400, "field 'tokens' must be an array of token ids (non-negative integers)");
  r.tokens = body["tokens"].get<std::vector<int32_t>>();
  return r;
}

}  // namespace kiln::serve
