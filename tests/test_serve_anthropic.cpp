// Anthropic's Messages API: its requests read as the OpenAI chat request
// they stand for (anthropic_requests.h), and a streamed message's content
// blocks opened and closed one after another (anthropic_answers.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apps/serve/anthropic_answers.h"
#include "apps/serve/anthropic_requests.h"
#include "serve_test_util.h"

namespace kiln::serve {
namespace {

std::string refusal(const std::string& body, bool counting = false) {
  return refused_by([counting](const std::string& b) { return parse_anthropic_messages(b, counting); }, body);
}

TEST(AnthropicRequests, TurnsAndBlocksBecomeTheOpenAIConversation) {
  const ChatRequest r = parse_anthropic_messages(R"({
    "model": "m", "max_tokens": 100000, "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
    "stop_sequences": ["END"], "temperature": 0, "stream": true,
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.", "signature": "s"},
                                        {"type": "text", "text": "Checking."},
                                        {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                    "content": [{"type": "text", "text": "4C"}], "cache_control": {"type": "ephemeral"}},
                                   {"type": "text", "text": "And tomorrow?"}]}],
    "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "thinking": {"type": "disabled"}, "metadata": {"user_id": "u"}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.max_tokens, 4096);  // Kiln's bound on one answer
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  const auto& m = r.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief.");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Look it up.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "t1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "weather");
  EXPECT_EQ(m[3]["role"], "tool");  // a turn's results first: they answer the calls before it
  EXPECT_EQ(m[3]["tool_call_id"], "t1");
  EXPECT_EQ(m[3]["content"], "4C");
  EXPECT_EQ(m[4]["role"], "user");
  EXPECT_EQ(m[4]["content"], "And tomorrow?");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(r.tool_choice.mode, text::ToolChoice::Mode::kRequired);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);

  const ChatRequest results_only = parse_anthropic_messages(R"({"model": "m", "max_tokens": 5, "messages": [
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "y"}]}],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "f"}})");
  EXPECT_EQ(results_only.messages.size(), 3u);  // no empty user turn after the results
  EXPECT_EQ(results_only.tool_choice.mode, text::ToolChoice::Mode::kNamed);
  EXPECT_EQ(results_only.tool_choice.name, "f");

  const ChatRequest counted = parse_anthropic_messages(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}})",
                                                       true);
  EXPECT_TRUE(counted.grammar) << "output_config.format constrains the answer";
}

TEST(AnthropicRequests, WhatKilnDoesNotDoIsRefusedByName) {
  const std::string turn = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_NE(refusal(R"({"model": "m", )" + turn + "}").find("max_tokens"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 0, )" + turn + "}").find("max_tokens"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 5, "container": "c", )" + turn + "}").find("'container'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 5, "messages": []})").find("'messages'"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})")
                .find("'system' field"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}]}]})")
                .find("text models"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
              {"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]})")
                .find("tool_use"),
            std::string::npos);
  EXPECT_NE(
      refusal(R"({"model": "m", "max_tokens": 5, "tools": [{"type": "bash_20250124", "name": "bash"}], )" + turn + "}")
          .find("built-in tool"),
      std::string::npos);
  EXPECT_NE(
      refusal(R"({"model": "m", "max_tokens": 5, "tool_choice": {"type": "some"}, )" + turn + "}").find("tool_choice"),
      std::string::npos);
  EXPECT_NE(
      refusal(R"({"model": "m", "max_tokens": 5, "thinking": {"type": "sometimes"}, )" + turn + "}").find("thinking"),
      std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "max_tokens": 5, )" + turn + "}", /*counting=*/true).find("'max_tokens'"),
            std::string::npos);
  EXPECT_NE(refusal("[1]").find("JSON object"), std::string::npos);
}

std::vector<std::string> types(const std::vector<nlohmann::json>& events) {
  std::vector<std::string> out;
  for (const auto& e : events)
    out.push_back(e["type"].get<std::string>() + (e.contains("index") ? std::to_string(e["index"].get<int>()) : ""));
  return out;
}

// Thinking, then text, then two calls: each block stops before the next starts, a thinking block is signed first,
// and the message's end says why it stopped.
TEST(AnthropicAnswers, StreamedBlocksComeOneAfterAnother) {
  AnthropicBlocks blocks("msg_1", "m");
  EXPECT_EQ(blocks.start()[0]["message"]["content"], nlohmann::json::array());
  std::vector<nlohmann::json> events;
  auto take = [&](std::vector<nlohmann::json> more) { events.insert(events.end(), more.begin(), more.end()); };
  take(blocks.reasoning("Hm"));
  take(blocks.reasoning("m."));
  take(blocks.text("Calling."));
  take(blocks.call(0, "t0", "f", R"({"a":)", true));
  take(blocks.call(0, "", "", "1}", false));
  take(blocks.call(1, "t1", "f", "{}", true));
  recipes::Completion c;
  c.finish_reason = "stop";
  c.prompt_tokens = 10, c.cached_tokens = 4, c.completion_tokens = 7;
  take(blocks.finish(c, /*called=*/true));
  EXPECT_EQ(
      types(events),
      (std::vector<std::string>{
          "content_block_start0", "content_block_delta0", "content_block_delta0", "content_block_delta0",
          "content_block_stop0", "content_block_start1", "content_block_delta1", "content_block_stop1",
          "content_block_start2", "content_block_delta2", "content_block_delta2", "content_block_stop2",
          "content_block_start3", "content_block_delta3", "content_block_stop3", "message_delta", "message_stop"}));
  EXPECT_EQ(events[3]["delta"]["type"], "signature_delta");
  EXPECT_EQ(events[8]["content_block"]["id"], "t0");
  EXPECT_EQ(events[10]["delta"]["partial_json"], "1}");
  EXPECT_EQ(events[15]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(events[15]["usage"]["input_tokens"], 6);
  EXPECT_EQ(events[15]["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(events[15]["usage"]["output_tokens"], 7);

  recipes::Completion stopped;
  stopped.finish_reason = "stop";
  stopped.stop_string = "END";
  EXPECT_EQ(anthropic_stop_reason(stopped, false), "stop_sequence");
  stopped.stop_string.clear();
  EXPECT_EQ(anthropic_stop_reason(stopped, false), "end_turn");
  stopped.finish_reason = "length";
  EXPECT_EQ(anthropic_stop_reason(stopped, true), "max_tokens");
  EXPECT_EQ(tool_use_block("i", {"f", "{\"x\": 1}"})["input"]["x"], 1);
  EXPECT_EQ(tool_use_block("i", {"f", "{\"x\": "})["input"]["_unparsed"], "{\"x\": ");
}

}  // namespace
}  // namespace kiln::serve
