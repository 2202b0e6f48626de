// A Hugging Face language model answering a chat: the conversation rendered
// by its template and encoded as apply_chat_template encodes it, the greedy
// reply equal to transformers' generate() on those ids
// (tests/hf/fixtures/chat), the reply ending at the template's end of turn,
// and each generated token's log-probability.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/recipes/hf_inference.h"
#include "kiln/core/error.h"
#include "kiln/text/hf_tokenizer.h"
#include "tests/hf_test_util.h"
#include "tests/run_test_util.h"

namespace kiln {
namespace {

using hf_test::expected;
using hf_test::fixture;
using hf_test::messages_of;
using nlohmann::json;
namespace fs = std::filesystem;

recipes::CompletionOptions greedy_chat(int64_t max_tokens) {
  recipes::CompletionOptions o;
  o.sampling.temperature = 0;
  o.max_tokens = max_tokens;
  o.chat = true;
  return o;
}

TEST(HfChat, GreedyReplyEqualsTransformersGenerateOnTheTemplatesIds) {
  const json served = expected("chat")["served"];
  const std::string dir = fixture(served["model"].get<std::string>());
  auto loaded = recipes::load_hf_for_inference(dir, Device::cpu(), {served["template"].get<std::string>()});
  const std::string prompt = loaded.model->render_chat(messages_of(served["messages"]));
  EXPECT_EQ(text::HfTokenizer::from_file(dir + "/tokenizer.json").encode(prompt, false),
            served["prompt_ids"].get<std::vector<int32_t>>());
  const auto greedy = served["greedy_ids"].get<std::vector<int32_t>>();
  recipes::CompletionOptions o = greedy_chat(int64_t(greedy.size()));
  o.logprobs = 3;
  const recipes::Completion c = loaded.model->complete(prompt, o, {});
  EXPECT_EQ(c.text, served["greedy_text"].get<std::string>());
  EXPECT_EQ(c.prompt_tokens, int64_t(served["prompt_ids"].size()));
  EXPECT_EQ(c.completion_tokens, int64_t(greedy.size()));
  EXPECT_EQ(c.finish_reason, "length");
  // Greedy: each token is the most likely at its position.
  ASSERT_EQ(c.logprobs.size(), greedy.size());
  for (size_t i = 0; i < greedy.size(); ++i) {
    const recipes::TokenLogprob& e = c.logprobs[i];
    EXPECT_EQ(e.id, greedy[i]);
    ASSERT_EQ(e.top.size(), 3u);
    EXPECT_EQ(e.top[0].token, e.token);
    EXPECT_EQ(e.top[0].id, e.id);
    EXPECT_DOUBLE_EQ(e.top[0].logprob, e.logprob);
    EXPECT_LT(e.logprob, 0);
    EXPECT_GE(e.top[0].logprob, e.top[1].logprob);
  }
}

TEST(HfChat, AReplyEndsAtTheTemplatesEndOfTurn) {
  // A copy of the fixture whose tokenizer spells ChatML's end of turn as the
  // fifth token the model replies with: a chat stops there, a plain
  // completion of the same text does not.
  const json served = expected("chat")["served"];
  const std::string source = fixture(served["model"].get<std::string>());
  const fs::path dir = testing::fresh_test_dir("hf_chat", "end_of_turn");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(source) / f, dir / f);
  json tok = json::parse(std::ifstream(fs::path(source) / "tokenizer.json"));
  const int32_t end_of_turn = served["greedy_ids"][4];
  tok["added_tokens"].push_back({{"id", end_of_turn}, {"content", "<|im_end|>"}, {"single_word", false},
                                 {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(dir / "tokenizer.json") << tok.dump();

  // The zephyr rendering holds no "<|im_end|>", so it encodes as in the fixture.
  auto zephyr = recipes::load_hf_for_inference(source, Device::cpu(), {"zephyr"});
  const std::string prompt = zephyr.model->render_chat(messages_of(served["messages"]));
  auto chatml = recipes::load_hf_for_inference(dir.string(), Device::cpu(), {"chatml"});
  const recipes::Completion chat = chatml.model->complete(prompt, greedy_chat(12), {});
  EXPECT_EQ(chat.finish_reason, "stop");
  EXPECT_EQ(chat.completion_tokens, 4);
  EXPECT_EQ(chat.text, zephyr.model->complete(prompt, greedy_chat(4), {}).text);
  recipes::CompletionOptions plain = greedy_chat(12);
  plain.chat = false;  // tokenizer(text) adds BOS here, and only the end of sequence stops it
  EXPECT_EQ(chatml.model->complete(prompt, plain, {}).completion_tokens, 12);
}

TEST(HfChat, AJinjaTemplatesReplyEndsAtTheTokenizersEosToken) {
  // The same model with its own template (Zephyr's text, its "</s>" written
  // out) and tokenizer_config.json's eos_token "<|im_end|>", the fifth token
  // the model replies with: a chat stops there, as llama-server stops at the
  // tokenizer's end of turn though generation_config.json lists only </s>.
  const json served = expected("chat")["served"];
  const std::string source = fixture(served["model"].get<std::string>());
  const fs::path dir = testing::fresh_test_dir("hf_chat", "jinja_end_of_turn");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    fs::copy_file(fs::path(source) / f, dir / f);
  json tok = json::parse(std::ifstream(fs::path(source) / "tokenizer.json"));
  tok["added_tokens"].push_back({{"id", served["greedy_ids"][4]}, {"content", "<|im_end|>"}, {"single_word", false},
                                 {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  json config = json::parse(std::ifstream(fs::path(source) / "tokenizer_config.json"));
  config["eos_token"] = "<|im_end|>";
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}</s>\n{% endfor %}"
                                                "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

  auto zephyr = recipes::load_hf_for_inference(source, Device::cpu(), {"zephyr"});
  const std::string prompt = zephyr.model->render_chat(messages_of(served["messages"]));
  auto own = recipes::load_hf_for_inference(dir.string(), Device::cpu());
  ASSERT_EQ(own.model->render_chat(messages_of(served["messages"])), prompt);
  const recipes::Completion chat = own.model->complete(prompt, greedy_chat(12), {});
  EXPECT_EQ(chat.finish_reason, "stop");
  EXPECT_EQ(chat.completion_tokens, 4);
  EXPECT_EQ(chat.text, zephyr.model->complete(prompt, greedy_chat(4), {}).text);
}

TEST(HfChat, ModelsWithoutAUsableTemplateSaySo) {
  // No template in the folder: completions work, chat says how to name one.
  auto plain = recipes::load_hf_for_inference(fixture("llama-gqa"), Device::cpu());
  try {
    plain.model->render_chat({{"user", "Hi"}});
    ADD_FAILURE() << "a folder without a chat template rendered a chat";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template NAME"), std::string::npos) << e.what();
  }
  // A named template whose end of turn the tokenizer lacks fails at load.
  try {
    recipes::load_hf_for_inference(fixture("llama-gqa"), Device::cpu(), {"chatml"});
    ADD_FAILURE() << "chatml loaded on a tokenizer without <|im_end|>";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|im_end|>, which is not a token"), std::string::npos) << e.what();
  }
  // A conversation the template refuses is an error naming the template's rule.
  auto mistral = recipes::load_hf_for_inference(fixture("mistral"), Device::cpu(), {"mistral"});
  EXPECT_THROW(mistral.model->render_chat({{"system", "Be brief."}, {"user", "Hi"}}), Error);
}

}  // namespace
}  // namespace kiln
