#include "apps/cli/template_command.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/io/text_file.h"
#include "kiln/text/chat_template.h"
#include "models/hf/hf_chat.h"
#include "models/hf/hf_model.h"

namespace kiln::cli {
namespace {

using ordered_json = nlohmann::ordered_json;

struct TemplateOptions {
  std::string model, template_file, messages, tools, kwargs, bos, eos;
  bool no_generation_prompt = false, bos_given = false, eos_given = false;
};

ordered_json read_json_file(const std::string& path, const char* what) {
  const std::string text = path == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {}) : read_text_file(path);
  try {
    return ordered_json::parse(text);
  } catch (const ordered_json::exception& e) {
    KILN_FAIL(what, " ", path, " is not valid JSON: ", e.what());
  }
}

}  // namespace

std::function<int()> add_apply_template_command(CLI::App& app) {
  auto o = std::make_shared<TemplateOptions>();
  auto* cmd = app.add_subcommand("apply-template",
                                 "print the text a chat template makes of a conversation (what the model is shown)");
  cmd->add_option("model", o->model, "hf:DIR or gguf:FILE: the model's own template and special tokens");
  cmd->add_option("--template-file", o->template_file, "a Jinja chat template file instead of a model's");
  cmd->add_option("--messages", o->messages,
                  "a JSON file (- for standard input): a list of messages, or a chat request with \"messages\" "
                  "(and \"tools\")")
      ->required();
  cmd->add_option("--tools", o->tools, "a JSON file with the list of tools (function schemas)");
  cmd->add_option("--template-kwargs", o->kwargs, "more template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
  auto* bos = cmd->add_option("--bos-token", o->bos, "the bos_token text the template sees (default: the model's)");
  auto* eos = cmd->add_option("--eos-token", o->eos, "the eos_token text the template sees (default: the model's)");
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt, "leave out the assistant turn's opening");
  return [cmd, o, bos, eos]() -> int {
    if (!*cmd) return -1;
    KILN_CHECK(o->model.empty() != o->template_file.empty(),
               "give a model folder (hf:DIR) or --template-file FILE, not ", o->model.empty() ? "neither" : "both");
    text::ChatTemplate t = [&] {
      if (!o->template_file.empty()) return text::ChatTemplate::from_jinja(read_text_file(o->template_file));
      const auto dir = models::hf_folder(o->model);
      KILN_CHECK(dir.has_value(), "apply-template takes a Hugging Face folder as hf:DIR, not '", o->model, "'");
      return models::load_hf_chat_template(*dir);
    }();
    if (*bos) t.tokens.bos = o->bos;
    if (*eos) t.tokens.eos = o->eos;
    ordered_json body = read_json_file(o->messages, "--messages");
    ordered_json messages = body.is_object() ? body.value("messages", ordered_json()) : body;
    KILN_CHECK(messages.is_array(), "--messages ", o->messages,
               " holds neither a list of messages nor an object with a \"messages\" list");
    ordered_json tools = body.is_object() ? body.value("tools", ordered_json()) : ordered_json();
    if (!o->tools.empty()) tools = read_json_file(o->tools, "--tools");
    KILN_CHECK(tools.is_null() || tools.is_array(), "the tools must be a JSON list of tool schemas");
    ordered_json extra = ordered_json::object();
    if (!o->kwargs.empty()) {
      try {
        extra = ordered_json::parse(o->kwargs);
      } catch (const ordered_json::exception& e) {
        KILN_FAIL("--template-kwargs is not valid JSON: ", e.what());
      }
      KILN_CHECK(extra.is_object(), "--template-kwargs must be a JSON object");
    }
    const std::string text = t.render_json(messages, tools, !o->no_generation_prompt, extra);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  };
}

}  // namespace kiln::cli
