// Reasoning (kiln/text/reasoning): the marks found by rendering reasoning
// through each real template of the corpus, whether a prompt leaves the
// answer inside them, and answers split the same whole and a character at
// a time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/grammar/matcher.h"
#include "kiln/text/reasoning.h"
#include "tests/hf_test_util.h"

namespace kiln::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

ChatTemplate corpus_template(const std::string& name) {
  std::stringstream ss;
  ss << std::ifstream(fs::path(hf_test::fixture("chat_templates")) / "templates" / name, std::ios::binary).rdbuf();
  ChatTemplate chat = ChatTemplate::from_jinja(ss.str());
  chat.tokens = {"<s>", "</s>"};
  chat.now_unix_seconds = 1783168200;
  return chat;
}

const ReasoningFormat& format_named(const std::string& name) {
  for (const auto& f : reasoning_formats())
    if (name == f.name) return f;
  throw std::runtime_error("no reasoning format " + name);
}

// Each real template's marks: those it writes a past answer's reasoning
// in, or (DeepSeek R1's, which drops past reasoning) opens its prompt with.
TEST(Reasoning, MarksAreFoundByRenderingReasoningThroughTheTemplate) {
  const std::map<std::string, std::string> expected = {
      {"Qwen-Qwen3-0.6B.jinja", "think"},
      {"Qwen3.5-4B.jinja", "think"},
      {"Qwen-QwQ-32B.jinja", "think"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "think"},
      {"llama-cpp-deepseek-r1.jinja", "think"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", "think"},
      {"GLM-4.6.jinja", "think"},
      {"GLM-4.7-Flash.jinja", "think"},
      {"MiniMax-M2.jinja", "think"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "think"},
      {"StepFun3.5-Flash.jinja", "think"},
      {"ByteDance-Seed-OSS.jinja", "seed-oss"},
      {"MiniMax-M3.jinja", "minimax-m3"},
      {"tencent-Hy3.jinja", "hunyuan"},
      {"Cohere2MoE.jinja", "command-r"},
      {"Kimi-K3.jinja", "kimi-k3"},
      {"google-gemma-4-31B-it.jinja", "gemma-4"},
      // Reasoning read under vLLM's name (reasoning) or gpt-oss's (thinking).
      {"upstage-Solar-Open-100B.jinja", "solar-open"},
      {"poolside-Laguna-XS.2.jinja", "think"},
      {"LFM2.5-8B-A1B.jinja", "think"},
      {"openai-gpt-oss-120b.jinja", "harmony"},
      {"muse-glimmer.jinja", "muse-glimmer"},
      // No reasoning in these templates.
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ""},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ""},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ""},
      {"google-gemma-2-2b-it.jinja", ""},
  };
  for (const auto& [name, format] : expected) {
    const ReasoningFormat* f = detect_reasoning_format(corpus_template(name));
    EXPECT_EQ(f ? f->name : "", format) << name;
  }
  EXPECT_EQ(detect_reasoning_format(chat_template_named("chatml")), nullptr) << "a built-in renderer writes none";
}

// DeepSeek R1's generation prompt opens the marks (llama.cpp's R1 distill
// template closes them again without enable_thinking); Qwen3's closes them when
// enable_thinking is false; a past turn's closed reasoning leaves the next
// answer outside.
TEST(Reasoning, PromptsThatOpenTheMarksStartTheAnswerInside) {
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "reasoning_content": "A greeting.", "content": "Hello."},
      {"role": "user", "content": "And again?"}])");
  const ReasoningFormat& think = format_named("think");
  auto inside = [&](const std::string& name, const json& kwargs) {
    return starts_in_reasoning(think, corpus_template(name).render_json(messages, json(), true, kwargs));
  };
  EXPECT_TRUE(inside("llama-cpp-deepseek-r1.jinja", json::object()));
  EXPECT_TRUE(inside("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {{"enable_thinking", true}}));
  EXPECT_FALSE(inside("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {{"enable_thinking", false}}));
  EXPECT_FALSE(inside("Qwen-Qwen3-0.6B.jinja", json::object())) << "Qwen3 may open <think> itself";
  EXPECT_FALSE(inside("Qwen-Qwen3-0.6B.jinja", {{"enable_thinking", false}})) << "closed: <think>\\n\\n</think>";
  EXPECT_TRUE(inside("GLM-4.7-Flash.jinja", json::object()));
}

struct Example {
  const char* format;
  bool inside;
  std::string text, reasoning, content;
};

TEST(Reasoning, AnswersSplitTheSameWholeAndACharacterAtATime) {
  const std::vector<Example> examples = {
      {"think", false, "<think>\nTwo and two.\n</think>\n\nFour.", "Two and two.", "Four."},
      {"think", false, "\n<think>Hm</think>Four.\n", "Hm", "Four.\n"},
      {"think", false, "Four, without thinking.", "", "Four, without thinking."},
      {"think", false, "<thinking is not the mark", "", "<thinking is not the mark"},
      {"think", false, "", "", ""},
      {"think", true, "Two and two.\n</think>\n\nFour.", "Two and two.", "Four."},
      {"think", true, "Cut off while thinking </thi", "Cut off while thinking </thi", ""},
      {"think", false, "<think>\nA </ b\n</think>\n<tool_call>\n{}", "A </ b", "<tool_call>\n{}"},
      {"seed-oss", false, "<seed:think>Sum.</seed:think>4", "Sum.", "4"},
      {"kimi-k3", true, "Sum.<|close|>think<|sep|><|open|>response<|sep|>4", "Sum.", "4"},
      {"solar-open", false, "<|think|>Sum.<|end|><|begin|>assistant4", "Sum.", "4"},
      {"harmony", false, "<|channel|>analysis<|message|>Sum.<|end|><|start|>assistant<|channel|>final<|message|>4",
       "Sum.", "<|channel|>final<|message|>4"},
      {"harmony", false, "<|channel|>final<|message|>4", "", "<|channel|>final<|message|>4"},
      // muse-glimmer: a message to itself, then one to the user (the prompt wrote "<|start|>assistant").
      {"muse-glimmer", false, " to=self<|message|>Sum.<|eom|><|start|>assistant to=user<|message|>4", "Sum.",
       "to=user<|message|>4"},
      {"muse-glimmer", false, " to=user<|message|>4", "", " to=user<|message|>4"},
  };
  for (const Example& e : examples) {
    const ReasoningFormat& f = format_named(e.format);
    const ReasonedAnswer whole = read_reasoning(f, e.inside, e.text, true);
    EXPECT_EQ(whole.reasoning, e.reasoning) << e.text;
    EXPECT_EQ(whole.content, e.content) << e.text;
    // Each longer prefix only extends both parts: what a stream sends adds up to the whole answer's.
    ReasonedAnswer before;
    for (size_t n = 0; n <= e.text.size(); ++n) {
      const ReasonedAnswer now = read_reasoning(f, e.inside, std::string_view(e.text).substr(0, n), n == e.text.size());
      ASSERT_TRUE(now.reasoning.starts_with(before.reasoning)) << e.text << " at " << n;
      ASSERT_TRUE(now.content.starts_with(before.content)) << e.text << " at " << n;
      ASSERT_TRUE(e.content.starts_with(now.content)) << e.text << " at " << n << ": content before it is known";
      before = now;
    }
  }
}

// A prompt that ends with the end mark leaves no reasoning to the answer.
TEST(Reasoning, PromptsThatCloseTheMarksLeaveNoReasoning) {
  const ReasoningFormat& think = format_named("think");
  EXPECT_TRUE(closes_reasoning(think, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(closes_reasoning(think, "<｜Assistant｜></think>"));
  EXPECT_FALSE(closes_reasoning(think, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(closes_reasoning(think, "<think>a</think>b<|im_end|>\n<|im_start|>assistant\n"));
  // Solar Open's reasoning_effort low: an empty reasoning turn, then the answer's.
  const ChatTemplate solar = corpus_template("upstage-Solar-Open-100B.jinja");
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_TRUE(closes_reasoning(format_named("solar-open"),
                               solar.render_json(user, json(), true, {{"reasoning_effort", "low"}})));
  EXPECT_FALSE(closes_reasoning(format_named("solar-open"), solar.render_json(user, json(), true)));
}


// The answer's text ends where the template closes it (Kimi K3's response
// tag, before its tool calls and the message's end).
TEST(Reasoning, TheAnswerEndsAtItsClosing) {
  const ReasoningFormat& kimi = format_named("kimi-k3");
  EXPECT_EQ(answer_text(kimi, "Four.<|close|>response<|sep|><|close|>message<|sep|>", true), "Four.");
  EXPECT_EQ(answer_text(kimi, "Four.<|close|>resp", false), "Four.") << "what may begin the closing is held back";
  EXPECT_EQ(answer_text(kimi, "Four.<|close|>resp", true), "Four.<|close|>resp");
  EXPECT_EQ(answer_text(format_named("think"), "Four.<|close|>response<|sep|>", true),
            "Four.<|close|>response<|sep|>") << "a format without a closing keeps all";
  // gpt-oss's final channel opens the answer's text, with reasoning before it or not.
  const ReasoningFormat& harmony = format_named("harmony");
  EXPECT_EQ(answer_text(harmony, "<|channel|>final<|message|>Four.", true), "Four.");
  EXPECT_EQ(answer_text(harmony, "<|channel|>fin", false), "") << "what may still be the opening is held back";
  EXPECT_EQ(answer_text(harmony, "Four.", true), "Four.");
  // muse-glimmer's message to the user, read with its leading space trimmed, ends with <|eom|> where calls follow.
  const ReasoningFormat& muse = format_named("muse-glimmer");
  EXPECT_EQ(answer_text(muse, "to=user<|message|>Four.<|eom|><|start|>assistant", true), "Four.");
  EXPECT_EQ(answer_text(muse, "to=us", false), "");
}

// Where a tool call's trigger may be looked for: after the reasoning only.
TEST(Reasoning, TheAnswerStartsAfterTheReasoning) {
  const ReasoningFormat& think = format_named("think");
  constexpr size_t kNotYet = std::string_view::npos;
  EXPECT_EQ(answer_start(think, false, "Hello <tool_call>"), 0u);
  EXPECT_EQ(answer_start(think, false, "\n"), kNotYet);
  EXPECT_EQ(answer_start(think, false, " <thi"), kNotYet);
  EXPECT_EQ(answer_start(think, false, "<think>x <tool_call>"), kNotYet);
  EXPECT_EQ(answer_start(think, false, "<think>x</think>\n<tool_call>"), 16u);
  EXPECT_EQ(answer_start(think, true, "x</think>y"), 9u);
  EXPECT_EQ(answer_start(think, true, "<tool_call>"), kNotYet);
  const ReasoningFormat& solar = format_named("solar-open");
  EXPECT_EQ(answer_start(solar, false, "<|think|>x<|end|><|begin|>assis"), kNotYet);
  EXPECT_EQ(answer_start(solar, false, "<|think|>x<|end|><|begin|>assistant<|tool_calls|>"), 35u);
}

// Whether `g` matches `text` whole.
bool matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(std::make_shared<const Grammar>(g));
  return m.accept(text) && m.can_end();
}

// A constrained answer after the reasoning: free text that does not close
// the marks, the end mark, then the answer's grammar; before any mark only
// the answer, where the prompt left the marks closed.
TEST(Reasoning, AConstrainedAnswerComesAfterTheReasoning) {
  const Grammar answer = *json_schema_grammar(json::parse(R"({"type": "object", "properties": {"n":
      {"type": "integer"}}, "required": ["n"], "additionalProperties": false})"));
  const ReasoningFormat& think = format_named("think");
  const Grammar open = grammar_after_reasoning(think, false, answer, true);
  EXPECT_TRUE(matches(open, R"({"n": 4})"));
  EXPECT_TRUE(matches(open, "<think>\nTwo and two: < </ </think </thinking> 4.\n</think>\n\n{\"n\": 4}"));
  EXPECT_TRUE(matches(open, "<think></think>{\"n\": 4}"));
  EXPECT_FALSE(matches(open, "<think>a</think> b</think>{\"n\": 4}")) << "the first end mark closes the reasoning";
  EXPECT_FALSE(matches(open, "<think>a</think>{\"n\": \"four\"}"));
  EXPECT_FALSE(matches(open, "Well, {\"n\": 4}"));
  EXPECT_FALSE(matches(open, "<think>unclosed {\"n\": 4}"));

  const Grammar inside = grammar_after_reasoning(think, true, answer, true);  // DeepSeek R1's prompt opened <think>
  EXPECT_TRUE(matches(inside, "Two and two.</think>\n\n{\"n\": 4}"));
  EXPECT_TRUE(matches(inside, "</think>{\"n\": 4}"));
  EXPECT_FALSE(matches(inside, "{\"n\": 4}")) << "the prompt opened the marks: the answer closes them first";

  // Marks of several tokens and special characters (Kimi K3's).
  const Grammar kimi = grammar_after_reasoning(format_named("kimi-k3"), false, answer, true);
  EXPECT_TRUE(matches(kimi, "<|open|>think<|sep|>a <|close|>thin<|sep|><|close|>think<|sep|><|open|>response<|sep|>"
                            "{\"n\": 1}"));
  EXPECT_FALSE(matches(kimi, "<|open|>think<|sep|>a<|close|>think<|sep|>b<|close|>think<|sep|><|open|>response<|sep|>"
                             "{\"n\": 1}"));

  // Solar Open: the answer's turn opens after the end mark.
  const Grammar solar = grammar_after_reasoning(format_named("solar-open"), false, answer, true);
  EXPECT_TRUE(matches(solar, "<|think|>Sum.<|end|><|begin|>assistant{\"n\": 4}"));
  EXPECT_FALSE(matches(solar, "<|think|>Sum.<|end|>{\"n\": 4}"));
  EXPECT_TRUE(matches(solar, "{\"n\": 4}")) << "an answer that does not reason is opened by the prompt";
  EXPECT_FALSE(matches(solar, "<|begin|>assistant{\"n\": 4}"));
  // gpt-oss: a content answer is in the final channel, a forced call is not.
  const ReasoningFormat& harmony = format_named("harmony");
  const Grammar final = grammar_after_reasoning(harmony, false, answer, true);
  EXPECT_TRUE(matches(final, "<|channel|>analysis<|message|>Sum.<|end|><|start|>assistant<|channel|>final<|message|>"
                             "{\"n\": 4}"));
  EXPECT_TRUE(matches(final, "<|channel|>final<|message|>{\"n\": 4}"));
  EXPECT_FALSE(matches(final, "{\"n\": 4}"));
  const Grammar call = grammar_after_reasoning(harmony, false, parse_gbnf("root ::= \"<|channel|>commentary\""), false);
  EXPECT_TRUE(matches(call, "<|channel|>analysis<|message|>Sum.<|end|><|start|>assistant<|channel|>commentary"));
  EXPECT_TRUE(matches(call, "<|channel|>commentary"));
  // muse-glimmer: the reasoning's message, then the answer's to the user.
  const Grammar muse = grammar_after_reasoning(format_named("muse-glimmer"), false, answer, true);
  EXPECT_TRUE(matches(muse, " to=self<|message|>Sum.<|eom|><|start|>assistant to=user<|message|>{\"n\": 4}"));
  EXPECT_TRUE(matches(muse, " to=user<|message|>{\"n\": 4}"));
  const Grammar kimi_thinking = grammar_after_reasoning(format_named("kimi-k3"), true, answer, true);
  EXPECT_TRUE(matches(kimi_thinking, "a<|close|>think<|sep|><|open|>response<|sep|>{\"n\": 1}"));
}

// The text before the end mark is exactly the text in which it does not
// occur, also for a mark that overlaps itself (KMP's failure links): every
// string of a's and b's up to 9 long, against the mark "abab".
TEST(Reasoning, ReasoningTextIsAnyTextInWhichTheEndMarkFirstOccursAtItsEnd) {
  const ReasoningFormat overlapping{"test", "<t>", "abab"};
  const Grammar g = grammar_after_reasoning(overlapping, true, parse_gbnf("root ::= \"X\""), true);
  int accepted = 0;
  for (int n = 0; n <= 9; ++n)
    for (int bits = 0; bits < (1 << n); ++bits) {
      std::string s;
      for (int i = 0; i < n; ++i) s += (bits >> i) & 1 ? 'b' : 'a';
      const bool closes_at_end = s.size() >= 4 && s.find("abab") == s.size() - 4;
      EXPECT_EQ(matches(g, s + "X"), closes_at_end) << s;
      accepted += closes_at_end;
    }
  EXPECT_GT(accepted, 20);
}

// A user's grammar may name its rules anything: the reasoning's rules take names it does not use.
TEST(Reasoning, ReasoningRulesDoNotCollideWithTheAnswers) {
  const Grammar answer = parse_gbnf("root ::= reasoning-answer\nreasoning-answer ::= \"yes\" | reasoning-text-0\n"
                                    "reasoning-text-0 ::= \"no\"");
  const Grammar g = grammar_after_reasoning(format_named("think"), false, answer, true);
  EXPECT_TRUE(matches(g, "<think>hm</think> no"));
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_FALSE(matches(g, "maybe"));
}

}  // namespace
}  // namespace kiln::text
