// OpenAI's Responses API: its requests read as the chat request they stand
// for (responses_requests.h), and a response's output items opened, filled
// and closed one after another (responses_answers.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apps/serve/responses_answers.h"
#include "apps/serve/responses_requests.h"
#include "serve_test_util.h"

namespace kiln::serve {
namespace {

std::string refusal(const std::string& body) { return refused_by(parse_openai_responses, body); }

TEST(ResponsesRequests, ItemsBecomeTheChatConversation) {
  const ChatRequest r = parse_openai_responses(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 100000, "temperature": 0, "store": true,
    "input": [
      {"role": "developer", "content": "And kind."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Look."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
      {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": "{\"city\": \"Rome\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "4C"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "20C"}]}],
    "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": "auto", "parallel_tool_calls": false,
    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
    "reasoning": {"effort": "low"}, "metadata": {"k": "v"}})");
  EXPECT_EQ(r.max_tokens, 4096);
  const auto& m = r.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief.");
  EXPECT_EQ(m[1]["role"], "system");
  EXPECT_EQ(m[2]["content"], "Weather?");
  EXPECT_EQ(m[3]["role"], "assistant");  // the reasoning, the text and both calls: one assistant turn
  EXPECT_EQ(m[3]["reasoning_content"], "Look.");
  EXPECT_EQ(m[3]["content"], "Checking.");
  ASSERT_EQ(m[3]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[3]["tool_calls"][1]["id"], "c2");
  EXPECT_EQ(m[4]["tool_call_id"], "c1");
  EXPECT_EQ(m[5]["content"], "20C");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.grammar) << "text.format json_schema constrains the answer";
  const ChatRequest named = parse_openai_responses(R"({"model": "m", "input": "x",
    "tools": [{"type": "function", "name": "weather"}], "tool_choice": {"type": "function", "name": "weather"}})");
  EXPECT_EQ(named.tool_choice.mode, text::ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.tool_choice.name, "weather");
  EXPECT_EQ(parse_openai_responses(R"({"model": "m", "input": "hi"})").messages[0]["content"], "hi");
  const ChatRequest kept_encrypted = parse_openai_responses(R"({"model": "m", "store": false,
    "include": ["reasoning.encrypted_content"], "input": [{"role": "user", "content": "x"},
      {"type": "reasoning", "summary": [], "encrypted_content": "Thought."},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Said."}]}]})");
  EXPECT_EQ(kept_encrypted.messages[1]["reasoning_content"], "Thought.");
  EXPECT_EQ(kept_encrypted.messages[1]["content"], "Said.");
}

TEST(ResponsesRequests, WhatKilnDoesNotDoIsRefusedByName) {
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "previous_response_id": "resp_1"})").find("keeps no responses"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "tools": [{"type": "file_search"}]})").find("built-in tool"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]})")
                .find("text models"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": [{"type": "item_reference", "id": "x"}]})").find("item_reference"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "background": true})").find("background"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "truncation": "auto"})").find("truncation"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "max_output_tokens": 0})").find("max_output_tokens"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "conversation": "c"})").find("'conversation'"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": []})").find("'input'"), std::string::npos);
  EXPECT_NE(refusal(R"({"model": "m", "input": "x", "include": ["file_search_call.results"]})").find("include"),
            std::string::npos);
}

// Reasoning, then text, then two calls: each item is added, its part added, filled and done, and the item done,
// before the next; the events are numbered; a cut answer ends response.incomplete; the response holds the items.
TEST(ResponsesAnswers, ItemsComeOneAfterAnother) {
  ResponsesItems items("resp_7", "m", 123, 16);
  std::vector<nlohmann::json> events = items.start();
  auto take = [&](std::vector<nlohmann::json> more) { events.insert(events.end(), more.begin(), more.end()); };
  take(items.reasoning("Hm"));
  take(items.text("Calling."));
  take(items.call(0, "call_a", "f", R"({"a":)", true));
  take(items.call(0, "", "", "1}", false));
  take(items.call(1, "call_b", "f", "{}", true));
  recipes::Completion c;
  c.finish_reason = "length";
  c.prompt_tokens = 10, c.cached_tokens = 4, c.completion_tokens = 16;
  take(items.finish(c, true));
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i]["type"]);
    EXPECT_EQ(events[i]["sequence_number"], i);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.incomplete"}));
  const nlohmann::json& r = items.response();
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(r["output"].size(), 4u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hm");
  EXPECT_EQ(r["output"][0]["encrypted_content"], "Hm");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Calling.");
  EXPECT_EQ(r["output"][2]["call_id"], "call_a");
  EXPECT_EQ(r["output"][2]["arguments"], R"({"a":1})");
  EXPECT_EQ(r["output"][3]["status"], "completed");
  EXPECT_EQ(r["usage"]["input_tokens"], 10);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);

  ResponsesItems empty("resp_8", "m", 123, 16);
  recipes::Completion ended;
  ended.finish_reason = "stop";
  empty.finish(ended, false);  // an empty answer is an empty message
  EXPECT_EQ(empty.response()["status"], "completed");
  EXPECT_EQ(empty.response()["output"][0]["content"][0]["text"], "");
}

}  // namespace
}  // namespace kiln::serve
