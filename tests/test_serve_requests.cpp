// /v1/completions and /v1/chat/completions against OpenAI's field lists:
// every documented field is either implemented (and reaches the request) or
// refused with a 400 that names it, never silently ignored; temperature 0
// means greedy.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>

#include "apps/serve/requests.h"
#include "kiln/core/random.h"
#include "kiln/text/base64.h"
#include "kiln/text/grammar/matcher.h"
#include "models/gpt/gpt.h"
#include "models/hf/hf_embedder.h"
#include "serve_test_util.h"

using kiln::serve::ChatRequest;
using kiln::serve::CompletionRequest;
using kiln::serve::HttpError;
using kiln::serve::InfillRequest;
using kiln::serve::parse_chat;
using kiln::serve::parse_completion;
using kiln::serve::parse_detokenize;
using kiln::serve::parse_llama_completion;
using kiln::serve::parse_llama_infill;
using kiln::serve::parse_rerank;
using kiln::serve::parse_tokenize;
using kiln::serve::RerankRequest;
using kiln::serve::TokenizeRequest;

namespace {

// The body {"model": "gpt", field: value}.
std::string with(const std::string& field, const std::string& value) {
  return R"({"model": "gpt", ")" + field + R"(": )" + value + "}";
}

std::string refusal(const std::string& body) { return refused_by(parse_completion, body); }
std::string chat_refusal(const std::string& body) { return refused_by(parse_chat, body); }

const char* const kMessages = R"("messages": [{"role": "user", "content": "Hi"}])";
// The chat body {"model": "m", "messages": [...], field: value}.
std::string chat_with(const std::string& field, const std::string& value) {
  return R"({"model": "m", )" + std::string(kMessages) + R"(, ")" + field + R"(": )" + value + "}";
}

}  // namespace

// OpenAI's reference for POST /v1/completions, field by field.
TEST(CompletionFields, ImplementedFieldsReachTheRequest) {
  const CompletionRequest r = parse_completion(
      R"({"model": "gpt", "prompt": "Hi", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 3,
          "stop": ["\n"], "stream": true, "user": "someone", "top_k": 7, "ignore_eos": true})");
  EXPECT_EQ(r.model, "gpt");
  EXPECT_EQ(r.prompts, std::vector<std::string>{"Hi"});
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.seed, 3u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.sampling.top_k, 7);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(CompletionFields, UnimplementedFieldsAreRefusedByNameUnlessTheyAskForNothing) {
  struct Case {
    const char* field;
    const char* asks_something;
    const char* asks_nothing;  // OpenAI's default
  };
  const Case cases[] = {
      {"best_of", "2", "1"},
      {"suffix", R"("end")", R"("")"},
  };
  for (const Case& c : cases) {
    const std::string message = refusal(with(c.field, c.asks_something));
    EXPECT_NE(message.find(std::string("field '") + c.field + "' is not supported"), std::string::npos)
        << c.field << ": " << message;
    EXPECT_EQ(refusal(with(c.field, c.asks_nothing)), "") << c.field;
  }
}

// lm-evaluation-harness's requests: token ids (one prompt, or a batch of
// them), echoed with their log-probabilities, with or without new tokens.
TEST(CompletionFields, TokenIdPromptsAndEchoAsLmEvaluationHarnessSendsThem) {
  const CompletionRequest r = parse_completion(
      R"({"model": "m", "prompt": [[5, 7, 9], [4]], "max_tokens": 1, "echo": true, "logprobs": 1, "seed": 1234})");
  EXPECT_EQ(r.prompt_ids, (std::vector<std::vector<int32_t>>{{5, 7, 9}, {4}}));
  EXPECT_EQ(r.prompt_count(), 2u);
  EXPECT_TRUE(r.prompts.empty());
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_EQ(parse_completion(with("prompt", "[5, 7, 9]")).prompt_ids, (std::vector<std::vector<int32_t>>{{5, 7, 9}}));
  EXPECT_EQ(parse_completion(R"({"model": "m", "prompt": "a b", "max_tokens": 0, "echo": true})").logprobs, std::nullopt);
  EXPECT_EQ(parse_completion(with("logprobs", "2")).logprobs, 2);  // the generated tokens' log-probabilities
  EXPECT_TRUE(parse_completion(with("echo", "true")).echo);        // the prompt, then its completion
  for (const char* bad : {"[1, -2]", "[[1], []]", "[[1], [\"a\"]]", "[[1], 2]"})
    EXPECT_NE(refusal(with("prompt", bad)).find("token ids"), std::string::npos) << bad;
  EXPECT_NE(refusal(R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 21})")
                .find("logprobs must be in [0, 20]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": true, "stream": true})")
                .find("not streamed"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": true, "n": 2})").find("leave n at 1"),
            std::string::npos);
  EXPECT_EQ(parse_completion(R"({"model": "m", "prompt": ["a", "b"], "max_tokens": 0, "echo": true})").prompt_count(),
            2u);
}

// OpenAI's batch of prompts: an array of strings, each with its own choices;
// an array of integers stays one prompt of token ids (for scoring).
TEST(CompletionFields, APromptArrayOfStringsIsABatch) {
  EXPECT_EQ(parse_completion(with("prompt", R"(["a", "b c"])")).prompts, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(parse_completion(R"({"model": "m"})").prompts, std::vector<std::string>{""});
  for (const char* bad : {R"(["a", 1])", R"([[1, 2], "a"])", R"([1, "a"])", "[]"})
    EXPECT_NE(refusal(with("prompt", bad)).find("field 'prompt'"), std::string::npos) << bad;
  std::string many = "[";
  for (int i = 0; i <= kiln::serve::kMaxPrompts; ++i) many += std::string(i ? "," : "") + "\"x\"";
  EXPECT_NE(refusal(with("prompt", many + "]")).find("1 to 2048 strings"), std::string::npos);
}

// OpenAI's n: that many choices of the prompt, 1 unless asked, at most 128.
TEST(CompletionFields, NAsksForThatManyChoices) {
  EXPECT_EQ(parse_completion(R"({"model": "m", "prompt": "x"})").n, 1);
  EXPECT_EQ(parse_completion(with("n", "3")).n, 3);
  EXPECT_EQ(parse_completion(with("n", "128")).n, 128);
  EXPECT_EQ(parse_chat(chat_with("n", "2")).n, 2);
  for (const char* bad : {"0", "-1", "129"})
    EXPECT_NE(refusal(with("n", bad)).find("n must be in [1, 128]"), std::string::npos) << bad;
  for (const char* bad : {"1.5", R"("2")"})
    EXPECT_NE(refusal(with("n", bad)).find("field 'n' must be an integer"), std::string::npos) << bad;
}

// vLLM's min_p and repetition_penalty, llama-server's repeat_penalty and
// repeat_last_n, OpenAI's presence and frequency penalties: read when sent,
// absent (the model's default, then OpenAI's) when not, refused out of range.
TEST(CompletionFields, PenaltiesAndMinPAreReadAndCheckedAndLeftOutWhenNotSent) {
  const CompletionRequest r = parse_completion(
      R"({"model": "m", "prompt": "x", "min_p": 0.05, "repetition_penalty": 1.1, "repeat_last_n": 64,
          "presence_penalty": 0.5, "frequency_penalty": -0.25})");
  EXPECT_EQ(r.sampling.min_p, 0.05);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(r.sampling.repetition_window, 64);
  EXPECT_EQ(r.sampling.presence_penalty, 0.5);
  EXPECT_EQ(r.sampling.frequency_penalty, -0.25);
  EXPECT_EQ(parse_completion(with("repeat_penalty", "1.3")).sampling.repetition_penalty, 1.3);
  const CompletionRequest plain = parse_completion(with("max_tokens", "3"));
  EXPECT_FALSE(plain.sampling.temperature || plain.sampling.top_k || plain.sampling.top_p || plain.sampling.min_p ||
               plain.sampling.repetition_penalty || plain.sampling.presence_penalty);
  const std::pair<const char*, const char*> refused[] = {{"min_p", "1.5"},
                                                         {"repetition_penalty", "0"},
                                                         {"repeat_penalty", "-1"},
                                                         {"presence_penalty", "2.5"},
                                                         {"frequency_penalty", "-3"},
                                                         {"repeat_last_n", "-2"},
                                                         {"top_k", "-1"},
                                                         {"top_p", "0"},
                                                         {"min_p", "\"x\""}};
  for (const auto& [field, value] : refused)
    EXPECT_NE(refusal(with(field, value)).find(field), std::string::npos) << field << " = " << value;
  EXPECT_NE(
      refusal(R"({"model": "m", "prompt": "x", "repetition_penalty": 1.1, "repeat_penalty": 1.2})").find("send one"),
      std::string::npos);
  EXPECT_EQ(
      parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "min_p": 0.1})").sampling.min_p,
      0.1);
  // OpenAI's logit_bias: token ids (as the object's keys) and biases in [-100, 100].
  EXPECT_EQ(parse_completion(with("logit_bias", R"({"50256": -100, "7": 2.5})")).logit_bias,
            (std::vector<std::pair<int32_t, float>>{{50256, -100.0f}, {7, 2.5f}}));
  for (const char* bad : {R"({"x": 1})", R"({"-3": 1})", R"({"99999999999": 1})", R"({"5": "high"})",
                          R"({"5": 100.5})", R"([[5, 1]])"})
    EXPECT_NE(refusal(with("logit_bias", bad)).find("logit_bias"), std::string::npos) << bad;
}

TEST(CompletionFields, UnknownFieldsAreRefusedAndNullMeansTheDefault) {
  EXPECT_NE(refusal(with("temprature", "0.5")).find("unknown field 'temprature'"), std::string::npos);
  const CompletionRequest r = parse_completion(with("max_tokens", "null"));
  EXPECT_EQ(r.max_tokens, 16);
}

TEST(CompletionFields, TemperatureZeroIsGreedyAndBelowZeroIsRefused) {
  EXPECT_EQ(parse_completion(with("temperature", "0")).sampling.temperature, 0.0);
  EXPECT_NE(refusal(with("temperature", "-0.1")).find("temperature must be >= 0"), std::string::npos);
  // Greedy whatever the seed, top_k or top_p: the most likely token, the first of equals.
  const std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.5f, 0.0f};
  for (uint64_t seed : {1u, 2u, 3u}) {
    kiln::Generator gen(seed);
    EXPECT_EQ(kiln::models::sample_token(logits, 0.0, 0, 1.0, gen), 1);
    EXPECT_EQ(kiln::models::sample_token(logits, 0.0, 2, 0.5, gen), 1);
  }
}

TEST(CompletionFields, StreamOptionsAskForUsageAtTheEndOfAStream) {
  EXPECT_TRUE(parse_completion(R"({"model": "m", "stream": true, "stream_options": {"include_usage": true}})")
                  .include_usage);
  EXPECT_NE(refusal(with("stream_options", R"({"include_usage": true})")).find("for streamed answers"),
            std::string::npos);
  EXPECT_NE(refusal(with("stream_options", R"({"continuous": true})")).find("stream_options.continuous"),
            std::string::npos);
}

// OpenAI's reference for POST /v1/chat/completions, field by field.
TEST(ChatFields, ImplementedFieldsReachTheRequest) {
  const ChatRequest r = parse_chat(
      R"({"model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                                     {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                                     {"role": "assistant", "content": "Hello", "name": "bot"}],
          "max_completion_tokens": 7, "temperature": 0.2, "top_p": 0.5, "seed": 4, "stop": "\n\n", "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3, "user": "u",
          "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "n": 1, "presence_penalty": null})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["role"], "system");  // developer is OpenAI's newer name for it
  EXPECT_EQ(r.messages[1]["content"], "Hi there");
  EXPECT_EQ(r.messages[2]["role"], "assistant");
  EXPECT_EQ(r.messages[2]["name"], "bot");
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_EQ(r.tool_choice.mode, kiln::text::ToolChoice::Mode::kNone);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.2);
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_EQ(r.seed, 4u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n\n"});
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(parse_chat(chat_with("max_tokens", "9")).max_tokens, 9);
  EXPECT_EQ(parse_chat(chat_with("user", "\"x\"")).max_tokens, 1024);  // the default bound
}

// Tools: the functions, the choice, and a tool-call round trip's messages
// (arguments as sent: the model's template takes them in its own form).
TEST(ChatFields, ToolsAndToolMessagesReachTheRequest) {
  const ChatRequest r = parse_chat(R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "21"}]}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                 "properties": {"city": {"type": "string"}}}}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_FALSE(r.messages[1].contains("content")) << "null is the template's undefined";
  const auto& call = r.messages[1]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_1");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Paris", "unit": "celsius"})") << "as sent";
  EXPECT_EQ(r.messages[2]["content"], "21");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tool_choice.mode, kiln::text::ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  // Tools without a choice: auto.
  const ChatRequest a = parse_chat(R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
      {"function": {"name": "f", "arguments": "not json"}}]}], "tools": [{"type": "function", "function": {"name": "f"}}]})");
  EXPECT_EQ(a.tool_choice.mode, kiln::text::ToolChoice::Mode::kAuto);
  EXPECT_EQ(a.messages[0]["tool_calls"][0]["function"]["arguments"], "not json");
}

// Constrained decoding: llama-server's `grammar` (GBNF) and OpenAI's JSON
// mode reach the request as a parsed grammar, on both endpoints.
TEST(ChatFields, GrammarAndJsonModeReachTheRequest) {
  EXPECT_FALSE(parse_chat(chat_with("user", "\"x\"")).grammar);
  const ChatRequest json_mode = parse_chat(chat_with("response_format", R"({"type": "json_object"})"));
  ASSERT_TRUE(json_mode.grammar);
  EXPECT_GE(json_mode.grammar->rules.size(), 7u);
  EXPECT_FALSE(parse_chat(chat_with("response_format", R"({"type": "text"})")).grammar);
  const ChatRequest g = parse_chat(chat_with("grammar", R"("root ::= \"yes\" | \"no\"")"));
  ASSERT_TRUE(g.grammar);
  EXPECT_EQ(g.grammar->rules[size_t(g.grammar->root)].alternatives.size(), 2u);
  const auto c = kiln::serve::parse_completion(R"({"model": "m", "prompt": "p", "response_format": {"type": "json_object"}})");
  EXPECT_TRUE(c.grammar);
  const ChatRequest schema = parse_chat(chat_with("response_format", R"({"type": "json_schema", "json_schema":
      {"name": "s", "strict": true, "schema": {"type": "object", "properties": {"z": {"type": "boolean"},
       "a": {"type": "null"}}, "required": ["z", "a"], "additionalProperties": false}}})"));
  ASSERT_TRUE(schema.grammar);
  kiln::text::GrammarMatcher in_order(schema.grammar), reordered(schema.grammar);
  EXPECT_TRUE(in_order.accept(R"({"z": true, "a": null})") && in_order.can_end()) << "the schema's key order";
  EXPECT_FALSE(reordered.accept(R"({"a": null, "z": true})") && reordered.can_end());
  EXPECT_TRUE(kiln::serve::parse_completion(R"({"model": "m", "prompt": "p", "json_schema": {"type": "integer"}})").grammar);
  EXPECT_NE(chat_refusal(R"({"model": "m", )" + std::string(kMessages) +
                         R"(, "grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})")
                .find("constraints: send one"),
            std::string::npos);
}

// chat_template_kwargs reach the template; reasoning_format says whether to split; both are checked.
TEST(ChatFields, TemplateVariablesAndReasoningFormatReachTheRequest) {
  const ChatRequest plain = parse_chat(chat_with("user", "\"x\""));
  EXPECT_TRUE(plain.template_kwargs.empty());
  EXPECT_TRUE(plain.split_reasoning) << "llama-server's default: auto";
  const ChatRequest r = parse_chat(chat_with("chat_template_kwargs", R"({"enable_thinking": false, "x": [1]})"));
  EXPECT_EQ(r.template_kwargs.dump(), R"({"enable_thinking":false,"x":[1]})");
  EXPECT_FALSE(parse_chat(chat_with("reasoning_format", R"("none")")).split_reasoning);
  EXPECT_TRUE(parse_chat(chat_with("reasoning_format", R"("deepseek")")).split_reasoning);
  for (const auto& [field, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"reasoning_format", R"("hidden")", "reasoning_format is 'hidden'"},
           {"reasoning_format", "1", "reasoning_format"},
           {"chat_template_kwargs", R"("enable_thinking")", "must be an object"},
           {"chat_template_kwargs", R"({"add_generation_prompt": false})", "set by the request itself"}})
    EXPECT_NE(chat_refusal(chat_with(field, value)).find(says), std::string::npos) << field << " " << value;
  // A past answer's reasoning, under OpenAI-compatible servers' names (llama-server's, vLLM's).
  for (const char* name : {"reasoning_content", "reasoning"}) {
    const ChatRequest past = parse_chat(std::string(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", ")") + name + R"(": "Greet back."}]})");
    EXPECT_EQ(past.messages[1][name], "Greet back.") << name;
  }
}

TEST(ChatFields, BadConversationsAndUnimplementedFieldsAreRefusedByName) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model": "m", "messages": []})", "non-empty array"},
      {R"({"model": "m"})", "non-empty array"},
      {R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})", "role is 'wizard'"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})", "needs the 'tool_call_id'"},
      {R"({"model": "m", "messages": [{"content": "x"}]})", "no 'role' string"},
      {R"({"model": "m", "messages": [{"role": "user"}]})", "has no 'content'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 42}]})", "content must be a string"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "type 'text'"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       "'tool_calls' is not supported in a user message"},
      {R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})",
       "function.name must be a string"},
      {R"({"model": "m", "messages": ["x"]})", "is not an object"},
      {chat_with("tools", R"([{"type": "function"}])"), "tools[0] must be"},
      {chat_with("tools", R"([{"type": "function", "function": {"name": "a b"}}])"), "letters, digits"},
      {chat_with("tools", R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])"),
       "a second function named 'f'"},
      {chat_with("tool_choice", R"("required")"), "'tool_choice' needs 'tools'"},
      {chat_with("tools", R"([{"type": "function", "function": {"name": "f"}}], "tool_choice": "always")"),
       "'tool_choice' must be"},
      {chat_with("tools", R"([{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})"),
       "names 'g', which is not among the tools"},
      {chat_with("tools", R"([{"type": "function", "function": {"name": "f"}}], "tool_choice": "required", "response_format": {"type": "json_object"})"),
       "cannot take a grammar or response_format too"},
      {chat_with("response_format", R"({"type": "json_schema", "json_schema": {"name": "x"}})"),
       "response_format.json_schema.schema is missing"},
      {chat_with("response_format", R"({"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a"}}})"),
       "response_format.json_schema.schema: JSON schema at #/pattern: pattern a must start with ^ and end with $"},
      {chat_with("json_schema", R"({"type": "array", "uniqueItems": true})"), "'uniqueItems' is not supported"},
      {chat_with("response_format", R"({"type": "yaml"})"), "must be \"text\", \"json_object\" or \"json_schema\""},
      {chat_with("response_format", R"("json")"), "must be an object with a string 'type'"},
      {chat_with("grammar", R"("root ::= undefined")"), "field 'grammar': grammar: rule 'undefined' is used"},
      {chat_with("grammar", "42"), "must be a GBNF grammar"},
      {chat_with("n", "0"), "n must be in [1, 128]"},
      {chat_with("logit_bias", R"({"1": 101})"), "the bias of token 1 must be a number in [-100, 100]"},
      {chat_with("prompt", R"("x")"), "unknown field 'prompt'"},
      {chat_with("top_logprobs", "2"), "needs logprobs: true"},
      {chat_with("top_logprobs", "21"), "top_logprobs must be in [0, 20]"},
      {chat_with("max_tokens", "0"), "max_tokens must be in [1, 4096]"},
      {R"({"model": "m", )" + std::string(kMessages) + R"(, "max_tokens": 3, "max_completion_tokens": 4})",
       "disagree"},
      {chat_with("temperature", "-1"), "temperature must be >= 0"},
  };
  for (const auto& [body, words] : cases)
    EXPECT_NE(chat_refusal(body).find(words), std::string::npos) << body << " -> " << chat_refusal(body);
}

// llama-server's /infill: /completion's fields with the text around the cursor and other files' chunks (a
// prompt optional, n_predict kept as sent).
TEST(LlamaInfillFields, TheCursorsTextAndChunksReachTheRequest) {
  const InfillRequest r = parse_llama_infill(
      R"({"input_prefix": "def f(", "input_suffix": ")\n", "input_extra": [{"text": "x = 1", "filename": "a.py"},
          {"text": "y"}], "n_predict": 16, "temperature": 0, "stream": true})");
  EXPECT_EQ(r.prefix, "def f(");
  EXPECT_EQ(r.suffix, ")\n");
  ASSERT_EQ(r.extra.size(), 2u);
  EXPECT_EQ(r.extra[0].filename, "a.py");
  EXPECT_EQ(r.extra[1].filename, "tmp");  // llama-server's default
  EXPECT_EQ(r.prompts, std::vector<std::string>{""});
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.n_predict, 16);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(parse_llama_infill(R"({"input_prefix": "x"})").n_predict, -1);
  // What llama.vscode and llama.vim send beside them
  const InfillRequest plugin = parse_llama_infill(
      R"({"input_prefix": "x", "n_indent": 4, "top_k": 40, "top_p": 0.99, "samplers": ["top_k", "top_p", "infill"],
          "cache_prompt": true, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
          "response_fields": ["content", "timings/prompt_n", "tokens_cached"]})");
  EXPECT_EQ(plugin.n_indent, 4);
  EXPECT_EQ(plugin.t_max_predict_ms, 1000);
  EXPECT_EQ(plugin.samplers, (std::vector<std::string>{"top_k", "top_p", "infill"}));
  EXPECT_EQ(plugin.response_fields, (std::vector<std::string>{"content", "timings/prompt_n", "tokens_cached"}));
  const std::pair<std::string, std::string> refused[] = {
      {R"({"input_prefix": "x", "n_indent": -1})", "n_indent must be 0 or more"},
      {R"({"input_prefix": "x", "samplers": ["top_k", "mirostat"]})", "'samplers' names 'mirostat'"},
      {R"({"input_prefix": "x", "samplers": "kpt"})", "'samplers' must be an array"},
      {R"({"input_prefix": "x", "response_fields": [1]})", "'response_fields' must be an array"},
      {R"({"input_prefix": [1, 2]})", "field 'input_prefix' must be a string"},
      {R"({"input_extra": {"text": "x"}})", "'input_extra' must be an array"},
      {R"({"input_extra": [{"text": 5}]})", "each of 'input_extra'"},
      {R"({"input_prefix": "x", "mirostat": 2})", "field 'mirostat' is not supported"},
  };
  for (const auto& [body, words] : refused)
    EXPECT_NE(refused_by(parse_llama_infill, body).find(words), std::string::npos)
        << body << " -> " << refused_by(parse_llama_infill, body);
}

// /rerank in Jina's and Cohere's shape (documents, top_n), or TEI's (texts, return_text: the answer a bare array),
// the model optional where one text classifier is served; TEI's raw scores refused by name.
TEST(RerankFields, CohereAndTeiShapesReachTheRequest) {
  RerankRequest r = parse_rerank(R"({"model": "rr", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1})");
  EXPECT_EQ(r.model, "rr");
  EXPECT_EQ(r.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.top_n, 1);
  EXPECT_TRUE(r.return_documents);
  EXPECT_FALSE(r.tei);
  r = parse_rerank(R"({"query": "q", "texts": ["a", "b"], "truncate": true})");
  EXPECT_TRUE(r.tei);
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(r.return_documents);  // TEI's return_text defaults to false
  EXPECT_TRUE(parse_rerank(R"({"query": "q", "texts": ["a"], "return_text": true})").return_documents);
  const std::pair<std::string, std::string> refused[] = {
      {R"({"query": "q", "texts": ["a"], "raw_scores": true})", "raw_scores true is not supported"},
      {R"({"query": "q", "texts": ["a"], "top_n": 1})", "unknown field 'top_n' (see docs/SERVING.md for the fields "
                                                        "/rerank in TEI's form"},
      {R"({"query": "q", "texts": []})", "'texts' must be an array of 1 to 1000 texts"},
      {R"({"query": "q", "texts": [{"text": "a"}]})", "each of 'texts' must be a string"},
      {R"({"query": "q", "texts": ["a"], "truncation_direction": "Left"})", "truncation_direction"},
  };
  for (const auto& [body, words] : refused)
    EXPECT_NE(refused_by(parse_rerank, body).find(words), std::string::npos)
        << body << " -> " << refused_by(parse_rerank, body);
}

// llama-server's own POST /completion: its names (n_predict, repeat_penalty,
// ...), -1 for "until the end" and "a random seed", no model needed, n_probs
// as the completions' logprobs; its samplers that Kiln has not refused by
// name unless off.
TEST(LlamaCompletionFields, LlamaServersFieldsReachTheRequest) {
  CompletionRequest r = parse_llama_completion(
      R"({"prompt": "Building a website can be done in 10 simple steps:", "n_predict": 128, "temperature": 0.5,
          "top_k": 20, "min_p": 0.1, "repeat_penalty": 1.1, "repeat_last_n": 32, "seed": 42, "stop": ["\n\n"],
          "stream": true, "cache_prompt": true, "n_keep": 4, "mirostat": 0, "typical_p": 1.0, "n_probs": 0})");
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.prompts, std::vector<std::string>{"Building a website can be done in 10 simple steps:"});
  EXPECT_EQ(r.max_tokens, 128);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_EQ(r.sampling.min_p, 0.1);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(r.sampling.repetition_window, 32);
  EXPECT_FALSE(r.sampling.top_p);  // left out: the model's, then llama-server's 0.95
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.logprobs);  // n_probs 0: no completion_probabilities
  EXPECT_EQ(parse_llama_completion(R"({"prompt": "x", "n_probs": 5})").logprobs, 5);
  EXPECT_EQ(parse_llama_completion(R"({"prompt": "x", "n_predict": -1})").max_tokens, 4096);
  EXPECT_EQ(parse_llama_completion(R"({"prompt": "x"})").max_tokens, 4096);
  EXPECT_NE(parse_llama_completion(R"({"prompt": "x", "seed": -1})").seed,
            parse_llama_completion(R"({"prompt": "x", "seed": -1})").seed);  // drawn (equal once in 2^64)

  const std::pair<std::string, std::string> refused[] = {
      {R"({"prompt": "x", "mirostat": 2})", "field 'mirostat' is not supported: Kiln has no mirostat sampler"},
      {R"({"prompt": "x", "typical_p": 0.9})", "field 'typical_p' is not supported"},
      {R"({"prompt": "x", "n_probs": 21})", "n_probs must be in [0, 20]"},
      {R"({"prompt": "x", "n_probs": 2, "post_sampling_probs": true})", "field 'post_sampling_probs' is not supported"},
      {R"({"prompt": "x", "n_predict": 5000})", "n_predict must be -1 or in [0, 4096]"},
      {R"({"prompt": [1, 2]})", "token-id prompts on /completion are not supported"},
      {R"({"n_predict": 4})", "missing field 'prompt'"},
      {R"({"prompt": "x", "max_tokens": 4})", "unknown field 'max_tokens'"},
      {R"({"prompt": "x", "temperature": -1})", "temperature must be >= 0"},
  };
  for (const auto& [body, words] : refused)
    EXPECT_NE(refused_by(parse_llama_completion, body).find(words), std::string::npos)
        << body << " -> " << refused_by(parse_llama_completion, body);
}

// POST /tokenize as llama-server's clients send it (content; no special
// tokens added unless asked) and as vLLM's do (prompt, with them; or a
// conversation, without them); /detokenize's ids.
TEST(TokenizeFields, LlamaServersAndVllmsShapesReachTheRequest) {
  TokenizeRequest r = parse_tokenize(R"({"content": "Hi there", "with_pieces": true})");
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.text, "Hi there");
  EXPECT_FALSE(r.add_special);
  EXPECT_TRUE(r.with_pieces);
  EXPECT_FALSE(r.chat);
  EXPECT_TRUE(parse_tokenize(R"({"content": "x", "add_special": true})").add_special);
  EXPECT_TRUE(r.parse_special);
  EXPECT_FALSE(parse_tokenize(R"({"content": "x", "parse_special": false})").parse_special);
  r = parse_tokenize(R"({"model": "m", "prompt": "Hi"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.text, "Hi");
  EXPECT_TRUE(r.add_special);
  EXPECT_FALSE(parse_tokenize(R"({"prompt": "Hi", "add_special_tokens": false})").add_special);
  r = parse_tokenize(R"({"model": "m", )" + std::string(kMessages) + R"(, "chat_template_kwargs": {"x": 1}})");
  ASSERT_TRUE(r.chat);
  EXPECT_EQ(r.chat->messages.size(), 1u);
  EXPECT_EQ(r.chat->template_kwargs["x"], 1);
  EXPECT_FALSE(r.add_special);
  EXPECT_EQ(parse_detokenize(R"({"tokens": [1, 2, 3]})").tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_detokenize(R"({"model": "m", "tokens": []})").model, "m");

  const std::pair<std::string, std::string> refused[] = {
      {R"({})", "one of them"},
      {R"({"content": "a", "prompt": "b"})", "one of them"},
      {R"({"content": 5})", "field 'content' must be a string"},
      {R"({"content": "a", "add_special": true, "add_special_tokens": true})", "one setting"},
      {R"({"content": "a", "parse_special": 0})", "field 'parse_special' must be true or false"},
      {R"({"content": "a", "add_generation_prompt": true})", "goes with 'messages'"},
      {R"({"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": false})", "is not supported"},
      {R"({"messages": []})", "non-empty array"},
      {R"({"content": "a", "stream": true})", "unknown field 'stream'"},
  };
  for (const auto& [body, words] : refused)
    EXPECT_NE(refused_by(parse_tokenize, body).find(words), std::string::npos)
        << body << " -> " << refused_by(parse_tokenize, body);
  for (const char* body :
       {R"({})", R"({"tokens": [1, -1]})", R"({"tokens": [1.5]})", R"({"tokens": "1"})", R"({"tokens": [2147483648]})"})
    EXPECT_NE(refused_by(parse_detokenize, body).find("array of token ids"), std::string::npos) << body;
}

// OpenAI's POST /v1/embeddings: text inputs, float or base64 answers, and
// what Kiln does not do (token-id inputs, unknown fields) refused by name.
TEST(EmbeddingFields, ImplementedFieldsReachTheRequestAndTheRestAreRefused) {
  using kiln::serve::parse_embeddings;
  const auto one = parse_embeddings(R"({"model": "e", "input": "a text"})");
  EXPECT_EQ(one.texts, std::vector<std::string>{"a text"});
  EXPECT_FALSE(one.base64);
  EXPECT_FALSE(one.dimensions);
  const auto many = parse_embeddings(
      R"({"model": "e", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 384, "user": "u"})");
  EXPECT_EQ(many.texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(many.base64);
  EXPECT_EQ(many.dimensions, 384);
  const auto refused = [](const std::string& body) { return refused_by(parse_embeddings, body); };
  EXPECT_NE(refused(R"({"model": "e", "input": [1, 2, 3]})").find("token ids"), std::string::npos);
  EXPECT_NE(refused(R"({"model": "e", "input": [[1, 2]]})").find("token ids"), std::string::npos);
  EXPECT_NE(refused(R"({"model": "e", "input": []})").find("'input'"), std::string::npos);
  EXPECT_NE(refused(R"({"model": "e"})").find("'input'"), std::string::npos);
  EXPECT_NE(refused(R"({"model": "e", "input": "x", "encoding_format": "int8"})").find("encoding_format"),
            std::string::npos);
  EXPECT_NE(refused(R"({"model": "e", "input": "x", "truncate": true})").find("'truncate'"), std::string::npos);
  EXPECT_NE(refused(R"({"model": "e", "input": "x", "dimensions": "big"})").find("dimensions"), std::string::npos);
  std::string huge = R"({"model": "e", "input": [)";
  for (int i = 0; i <= kiln::serve::kMaxEmbeddingInputs; ++i) huge += std::string(i ? "," : "") + "\"x\"";
  EXPECT_NE(refused(huge + "]}").find("2048"), std::string::npos);
}

// Hugging Face TEI's /embed and llama-server's /embedding: what each reads, its normalisation (TEI's normalize,
// true by default; llama.cpp's embd_normalize, 2 by default), TEI's prompt_name and truncate (false by default),
// and OpenAI's shortened embeddings normalised again; what they do not take refused by name.
TEST(EmbeddingFields, TeiAndLlamaServerRequests) {
  using kiln::serve::parse_embeddings;
  using kiln::serve::parse_llama_embedding;
  using kiln::serve::parse_tei_embed;
  EXPECT_EQ(parse_embeddings(R"({"model": "e", "input": "x"})").normalization, -1);
  EXPECT_EQ(parse_embeddings(R"({"model": "e", "input": "x", "dimensions": 8})").normalization, 2);
  const auto tei = parse_tei_embed(R"({"inputs": "a text"})");
  EXPECT_EQ(tei.texts, std::vector<std::string>{"a text"});
  EXPECT_EQ(tei.model, "");
  EXPECT_EQ(tei.normalization, 2);
  EXPECT_FALSE(tei.truncate);
  EXPECT_FALSE(tei.prompt_name);
  const auto asked = parse_tei_embed(
      R"({"inputs": ["a", "b"], "normalize": false, "truncate": true, "truncation_direction": "Right",
          "prompt_name": "query", "dimensions": 16, "model": "m"})");
  EXPECT_EQ(asked.texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(asked.normalization, -1);
  EXPECT_TRUE(asked.truncate);
  EXPECT_EQ(asked.prompt_name, "query");
  EXPECT_EQ(asked.dimensions, 16);
  EXPECT_EQ(asked.model, "m");
  const auto tei_refused = [](const std::string& body) { return refused_by(parse_tei_embed, body); };
  EXPECT_NE(tei_refused(R"({"inputs": "x", "truncation_direction": "Left"})").find("Right"), std::string::npos);
  EXPECT_NE(tei_refused(R"({"inputs": [[1, 2]]})").find("token ids"), std::string::npos);
  EXPECT_NE(tei_refused(R"({"input": "x"})").find("'input'"), std::string::npos);
  EXPECT_NE(tei_refused(R"({"inputs": "x", "prompt_name": 3})").find("prompt_name"), std::string::npos);

  const auto llama = parse_llama_embedding(R"({"content": ["a", "b"]})");
  EXPECT_EQ(llama.texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(llama.normalization, 2);
  EXPECT_TRUE(llama.truncate);
  EXPECT_EQ(parse_llama_embedding(R"({"input": "i", "content": "c", "embd_normalize": -1})").texts,
            std::vector<std::string>{"i"});  // llama-server reads "input" first
  EXPECT_EQ(parse_llama_embedding(R"({"content": "c", "embd_normalize": 3})").normalization, 3);
  const auto llama_refused = [](const std::string& body) { return refused_by(parse_llama_embedding, body); };
  EXPECT_NE(llama_refused(R"({"content": "x", "embd_normalize": -2})").find("embd_normalize"), std::string::npos);
  EXPECT_NE(llama_refused(R"({"content": "x", "encoding_format": "base64"})").find("/v1/embeddings"),
            std::string::npos);
  EXPECT_NE(llama_refused(R"({"content": "x", "n_predict": 3})").find("'n_predict'"), std::string::npos);
  EXPECT_NE(llama_refused(R"({})").find("'content'"), std::string::npos);
}

// TEI's /predict: a text or texts (the answer's shape follows), the Inference API's parameters.top_k; raw scores,
// pairs and the Inference API's other parameters refused by name.
TEST(PredictFields, TextsTopKAndRefusals) {
  using kiln::serve::parse_tei_predict;
  const auto one = parse_tei_predict(R"({"inputs": "a", "truncate": true})", 8);
  EXPECT_EQ(one.texts, std::vector<std::string>{"a"});
  EXPECT_FALSE(one.batch);
  const auto many = parse_tei_predict(R"({"inputs": ["a", "b"], "model": "c", "parameters": {"top_k": 2,
                                          "function_to_apply": null}})",
                                      8);
  EXPECT_TRUE(many.batch);
  EXPECT_EQ(many.model, "c");
  EXPECT_EQ(many.top_k, 2);
  const auto refused = [](const std::string& body) {
    return kiln::serve::refused_by([](const std::string& b) { return parse_tei_predict(b, 2); }, body);
  };
  EXPECT_NE(refused(R"({"inputs": [["a", "b"]]})").find("pairs"), std::string::npos);
  EXPECT_NE(refused(R"({"inputs": "a", "raw_scores": true})").find("raw_scores"), std::string::npos);
  EXPECT_NE(refused(R"({"inputs": ["a", "b", "c"]})").find("--max-batch"), std::string::npos);
  EXPECT_NE(refused(R"({"inputs": "a", "parameters": {"function_to_apply": "none"}})").find("function_to_apply"),
            std::string::npos);
  EXPECT_NE(refused(R"({"inputs": "a", "parameters": {"top_k": 0}})").find("top_k"), std::string::npos);
}

// vLLM's /v1/score: one text_1 against each text_2, or pair by pair; what does not pair up is refused.
TEST(ScoreFields, PairsAndRefusals) {
  using kiln::serve::parse_score;
  const auto one = parse_score(R"({"model": "r", "text_1": "q", "text_2": ["a", "b"]})");
  EXPECT_EQ(one.model, "r");
  EXPECT_EQ(one.pairs, (std::vector<std::pair<std::string, std::string>>{{"q", "a"}, {"q", "b"}}));
  const auto paired = parse_score(R"({"text_1": ["q1", "q2"], "text_2": ["a", "b"]})");
  EXPECT_EQ(paired.pairs, (std::vector<std::pair<std::string, std::string>>{{"q1", "a"}, {"q2", "b"}}));
  EXPECT_EQ(parse_score(R"({"text_1": "q", "text_2": "a"})").pairs.size(), 1u);
  const auto refused = [](const std::string& body) { return refused_by(parse_score, body); };
  EXPECT_NE(refused(R"({"text_1": ["a", "b"], "text_2": ["c"]})").find("as many as text_2"), std::string::npos);
  EXPECT_NE(refused(R"({"text_1": "q"})").find("'text_2'"), std::string::npos);
  EXPECT_NE(refused(R"({"text_1": "q", "text_2": []})").find("'text_2'"), std::string::npos);
  EXPECT_NE(refused(R"({"text_1": "q", "text_2": [1]})").find("text_2"), std::string::npos);
  EXPECT_NE(refused(R"({"text_1": "q", "text_2": "a", "truncate_prompt_tokens": 4})").find("'truncate_prompt_tokens'"),
            std::string::npos);
}

// llama.cpp's embd_normalize: none, the largest |x| to an int16's 32760, Euclidean, a p-norm; zero stays zero.
TEST(EmbeddingFields, NormalisedAsLlamaCpp) {
  using kiln::models::normalize_embedding;
  const auto normalised = [](std::vector<float> v, int norm) {
    normalize_embedding(v, norm);
    return v;
  };
  EXPECT_EQ(normalised({3, -4}, -1), (std::vector<float>{3, -4}));
  EXPECT_EQ(normalised({3, -4}, 0), (std::vector<float>{24570, -32760}));
  EXPECT_EQ(normalised({3, -4}, 2), (std::vector<float>{0.6f, -0.8f}));
  const std::vector<float> one_norm = normalised({3, -4}, 1);
  EXPECT_FLOAT_EQ(one_norm[0], 3.0f / 7);
  EXPECT_FLOAT_EQ(one_norm[1], -4.0f / 7);
  EXPECT_EQ(normalised({0, 0}, 2), (std::vector<float>{0, 0}));
}

TEST(EmbeddingFields, Base64IsRfc4648) {
  using kiln::text::base64_decode;
  using kiln::text::base64_encode;
  EXPECT_EQ(base64_encode("", 0), "");
  EXPECT_EQ(base64_encode("f", 1), "Zg==");
  EXPECT_EQ(base64_encode("fo", 2), "Zm8=");
  EXPECT_EQ(base64_encode("foo", 3), "Zm9v");
  EXPECT_EQ(base64_encode("foobar", 6), "Zm9vYmFy");
  const float one = 1.0f;  // little-endian 00 00 80 3f
  EXPECT_EQ(base64_encode(&one, sizeof one), "AACAPw==");
  EXPECT_EQ(base64_decode("Zm9vYmFy"), "foobar");
  EXPECT_EQ(base64_decode("Zm8="), "fo");
  EXPECT_EQ(base64_decode("Zm9v!"), std::nullopt);
}
