// /v1/completions against OpenAI's field list: every documented field is
// either implemented (and reaches the request) or refused with a 400 that
// names it, never silently ignored; temperature 0 means greedy.
#include <gtest/gtest.h>

#include <string>

#include "apps/serve/requests.h"
#include "kiln/core/random.h"
#include "models/gpt/gpt.h"

using kiln::serve::CompletionRequest;
using kiln::serve::HttpError;
using kiln::serve::parse_completion;

namespace {

// The body {"model": "gpt", field: value}.
std::string with(const std::string& field, const std::string& value) {
  return R"({"model": "gpt", ")" + field + R"(": )" + value + "}";
}

// The 400's message for `body`, or "" when it is accepted.
std::string refusal(const std::string& body) {
  try {
    parse_completion(body);
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.what();
  }
  return "";
}

}  // namespace

// OpenAI's reference for POST /v1/completions, field by field.
TEST(CompletionFields, ImplementedFieldsReachTheRequest) {
  const CompletionRequest r = parse_completion(
      R"({"model": "gpt", "prompt": "Hi", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 3,
          "stop": ["\n"], "stream": true, "user": "someone", "top_k": 7, "ignore_eos": true})");
  EXPECT_EQ(r.model, "gpt");
  EXPECT_EQ(r.prompt, "Hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.seed, 3u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.top_k, 7);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(CompletionFields, UnimplementedFieldsAreRefusedByNameUnlessTheyAskForNothing) {
  struct Case {
    const char* field;
    const char* asks_something;
    const char* asks_nothing;  // OpenAI's default
  };
  const Case cases[] = {
      {"n", "1000000", "1"},
      {"best_of", "2", "1"},
      {"frequency_penalty", "0.5", "0"},
      {"presence_penalty", "-1", "0.0"},
      {"logit_bias", R"({"50256": -100})", "{}"},
      {"suffix", R"("end")", R"("")"},
      {"stream_options", R"({"include_usage": true})", R"({"include_usage": false})"},
  };
  for (const Case& c : cases) {
    const std::string message = refusal(with(c.field, c.asks_something));
    EXPECT_NE(message.find(std::string("field '") + c.field + "' is not supported"), std::string::npos)
        << c.field << ": " << message;
    EXPECT_EQ(refusal(with(c.field, c.asks_nothing)), "") << c.field;
  }
}

// lm-evaluation-harness's loglikelihood request: the prompt (text or token
// ids) echoed with its log-probabilities and no new tokens.
TEST(CompletionFields, EchoAndLogprobsScoreThePromptOnly) {
  const CompletionRequest r = parse_completion(R"({"model": "m", "prompt": [5, 7, 9], "max_tokens": 0, "echo": true, "logprobs": 3})");
  ASSERT_TRUE(r.prompt_ids);
  EXPECT_EQ(*r.prompt_ids, (std::vector<int32_t>{5, 7, 9}));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(parse_completion(R"({"model": "m", "prompt": "a b", "max_tokens": 0, "echo": true})").logprobs, std::nullopt);
  EXPECT_NE(refusal(with("logprobs", "2")).find("supported for scoring a prompt"), std::string::npos);
  EXPECT_NE(refusal(with("echo", "true")).find("supported for scoring a prompt"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "prompt": [1, -2], "max_tokens": 0, "echo": true})").find("token ids"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 21})")
                .find("logprobs must be in [0, 20]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "prompt": "x", "max_tokens": 0, "echo": true, "stream": true})")
                .find("not streamed"),
            std::string::npos);
}

TEST(CompletionFields, UnknownFieldsAreRefusedAndNullMeansTheDefault) {
  EXPECT_NE(refusal(with("temprature", "0.5")).find("unknown field 'temprature'"), std::string::npos);
  const CompletionRequest r = parse_completion(with("max_tokens", "null"));
  EXPECT_EQ(r.max_tokens, 16);
}

TEST(CompletionFields, TemperatureZeroIsGreedyAndBelowZeroIsRefused) {
  EXPECT_EQ(parse_completion(with("temperature", "0")).temperature, 0.0);
  EXPECT_NE(refusal(with("temperature", "-0.1")).find("temperature must be >= 0"), std::string::npos);
  // Greedy whatever the seed, top_k or top_p: the most likely token, the first of equals.
  const std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.5f, 0.0f};
  for (uint64_t seed : {1u, 2u, 3u}) {
    kiln::Generator gen(seed);
    EXPECT_EQ(kiln::models::sample_token(logits, 0.0, 0, 1.0, gen), 1);
    EXPECT_EQ(kiln::models::sample_token(logits, 0.0, 2, 0.5, gen), 1);
  }
}
