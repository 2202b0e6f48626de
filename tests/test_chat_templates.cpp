// Chat templates against transformers' apply_chat_template on the Jinja
// source the real models ship (tests/hf/fixtures/chat, made by
// tests/hf/make_fixtures.py): each template run by Kiln's Jinja engine, and
// each built-in family renderer (for folders without a template), on
// conversations with and without a system turn, whitespace to trim, roles
// out of order. tests/test_jinja_corpus.cpp runs 70 more real templates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "kiln/core/error.h"
#include "kiln/io/gguf_writer.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/hf_tokenizer.h"
#include "models/hf/hf_chat.h"
#include "tests/hf_test_util.h"
#include "tests/run_test_util.h"

namespace kiln {
namespace {

using hf_test::expected;
using hf_test::fixture;
using hf_test::messages_of;
using nlohmann::json;
namespace fs = std::filesystem;

// The fixture's name for a template -> its family's built-in renderer.
std::string family_of(const std::string& fixture_name) { return fixture_name.substr(0, fixture_name.find('-')); }

TEST(ChatTemplates, RenderAsTransformersDoesForEveryFamily) {
  const json e = expected("chat");
  const auto tokenizer = text::HfTokenizer::from_file(fixture("tokenizers/llama2/tokenizer.json"));
  std::set<std::string> families;
  int refused = 0;
  for (const auto& row : e["renders"]) {
    const std::string name = row["template"];
    // The template's own program, and the family's built-in renderer where the
    // template is the family's plain one (Qwen2's adds a default system turn).
    std::vector<text::ChatTemplate> runs = {text::ChatTemplate::from_jinja(e["sources"][name].get<std::string>())};
    if (name == family_of(name)) runs.push_back(text::chat_template_named(name));
    for (text::ChatTemplate t : runs) {
      if (!t.is_jinja()) families.insert(t.name());
      // The family's own bos/eos text, as the fixture gave it to transformers.
      t.tokens = {e["tokens"][name]["bos"].get<std::string>(), e["tokens"][name]["eos"].get<std::string>()};
      const auto ms = messages_of(row["messages"]);
      const bool gen = row["add_generation_prompt"];
      SCOPED_TRACE(name + " (" + t.name() + ") " + row["messages"].dump() + (gen ? " +generation prompt" : ""));
      if (row.contains("error")) {
        try {
          t.render(ms, gen);
          ADD_FAILURE() << "transformers refused this conversation: " << row["error"];
        } catch (const Error& err) {
          EXPECT_NE(std::string(err.what()).find(row["error"].get<std::string>()), std::string::npos) << err.what();
          ++refused;
        }
        continue;
      }
      const std::string text = t.render(ms, gen);
      EXPECT_EQ(text, row["text"].get<std::string>());
      EXPECT_EQ(tokenizer.encode(text, false), row["ids"].get<std::vector<int32_t>>());
    }
  }
  EXPECT_EQ(families.size(), text::chat_template_names().size());
  EXPECT_GT(refused, 0);
}

TEST(ChatTemplates, QwenDefaultSystemTurnComesFromTheTemplate) {
  const json e = expected("chat");
  const auto t = text::ChatTemplate::from_jinja(e["sources"]["chatml-qwen2"].get<std::string>());
  EXPECT_EQ(t.render({{"user", "Hi"}}), "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplates, UnknownNamesAreRefusedWithTheKnownOnes) {
  try {
    text::chat_template_named("vicuna");
    ADD_FAILURE() << "named an unknown family";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chatml, llama3, llama2, mistral, gemma, phi3, zephyr"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(text::chat_template_named("gemma").end_of_turn(), "<end_of_turn>");
  // A template's syntax error is found when the folder loads, with its line.
  try {
    text::ChatTemplate::from_jinja("{% for m in messages %}\n{{ m.content }\n");
    ADD_FAILURE() << "parsed a broken template";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplates, AFolderGivesItsTemplateOrSaysHowToNameOne) {
  // The fixtures ship no template: naming one works, and omitting it says how.
  const std::string dir = fixture("llama-mqa-tied");
  try {
    models::load_hf_chat_template(dir);
    ADD_FAILURE() << "a folder without a chat template gave one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template NAME"), std::string::npos) << e.what();
  }
  const auto named = models::load_hf_chat_template(dir, "zephyr");
  EXPECT_EQ(named.name(), "zephyr");
  EXPECT_EQ(named.tokens.bos, "<s>");
  EXPECT_EQ(named.tokens.eos, "</s>");

  const json sources = expected("chat")["sources"];
  const fs::path d = testing::fresh_test_dir("chat_templates", "folder");
  fs::create_directories(d);
  auto write = [&](const std::string& file, const std::string& text) { std::ofstream(d / file) << text; };
  // tokenizer_config.json: a list of named templates, tokens as added-token objects.
  write("tokenizer_config.json",
        json{{"bos_token", {{"content", "<|begin_of_text|>"}}},
             {"eos_token", "<|eot_id|>"},
             {"chat_template", json::array({{{"name", "tool_use"}, {"template", sources["chatml"]}},
                                            {{"name", "default"}, {"template", sources["llama3"]}}})}}
            .dump());
  auto t = models::load_hf_chat_template(d.string());
  EXPECT_TRUE(t.is_jinja());
  const std::string llama3_hi =
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(t.render({{"user", "Hi"}}), llama3_hi);
  // With tools (a list, even an empty one), the "tool_use" template renders, as transformers picks it.
  const nlohmann::ordered_json hi = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  text::ChatTemplate chatml = text::ChatTemplate::from_jinja(sources["chatml"].get<std::string>());
  chatml.tokens = t.tokens;
  const std::string with_tools = chatml.render_json(hi, nlohmann::ordered_json::array(), true);
  EXPECT_NE(with_tools, t.render({{"user", "Hi"}}));
  EXPECT_EQ(t.render_json(hi, nlohmann::ordered_json::array(), true), with_tools);
  EXPECT_EQ(t.render_json(hi, nullptr, true), t.render({{"user", "Hi"}}));
  // transformers 5 saves a second template as additional_chat_templates/NAME.jinja.
  write("chat_template.jinja", sources["llama3"].get<std::string>());
  fs::create_directories(d / "additional_chat_templates");
  write("additional_chat_templates/tool_use.jinja", sources["chatml"].get<std::string>());
  write("tokenizer_config.json", json{{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}}.dump());
  t = models::load_hf_chat_template(d.string());
  EXPECT_EQ(t.render_json(hi, nlohmann::ordered_json::array(), true), with_tools);
  EXPECT_EQ(t.render({{"user", "Hi"}}), llama3_hi);
  fs::remove_all(d / "additional_chat_templates");
  fs::remove(d / "chat_template.jinja");
  // A GGUF file's: tokenizer.chat_template.tool_use beside tokenizer.chat_template (llama.cpp's converter's keys).
  const std::string gguf = (d / "templates.gguf").string();
  write_gguf(gguf,
             {{"tokenizer.chat_template", sources["llama3"]},
              {"tokenizer.chat_template.tool_use", sources["chatml"]},
              {"tokenizer.ggml.tokens", {"<|begin_of_text|>", "<|eot_id|>"}},
              {"tokenizer.ggml.bos_token_id", 0}},
             {});
  t = models::load_hf_chat_template(gguf);
  EXPECT_EQ(t.render_json(hi, nlohmann::ordered_json::array(), true), with_tools);
  EXPECT_EQ(t.render({{"user", "Hi"}}), llama3_hi);
  write_gguf(gguf, {{"tokenizer.chat_template", sources["llama3"]}, {"tokenizer.chat_template.tool_use", 3}}, {});
  EXPECT_THROW(models::load_hf_chat_template(gguf), Error);
  fs::remove(gguf);
  // chat_template.jinja (what transformers 5 saves) comes first.
  write("chat_template.jinja", sources["gemma"].get<std::string>());
  EXPECT_EQ(models::load_hf_chat_template(d.string()).render({{"user", "Hi"}}),
            "<|begin_of_text|><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  fs::remove(d / "chat_template.jinja");
  // chat_template.json (a processor's: Gemma 3's multimodal folders) comes before tokenizer_config.json's.
  write("chat_template.json", json{{"chat_template", sources["gemma"]}}.dump());
  EXPECT_EQ(models::load_hf_chat_template(d.string()).render({{"user", "Hi"}}),
            "<|begin_of_text|><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  write("chat_template.json", "{\"chat_template\": [1]}");
  EXPECT_THROW(models::load_hf_chat_template(d.string()), Error);
  fs::remove(d / "chat_template.json");
  write("tokenizer_config.json", "{\"chat_template\": 7}");
  EXPECT_THROW(models::load_hf_chat_template(d.string()), Error);
  write("tokenizer_config.json", "{not json");
  EXPECT_THROW(models::load_hf_chat_template(d.string()), Error);
}

}  // namespace
}  // namespace kiln
