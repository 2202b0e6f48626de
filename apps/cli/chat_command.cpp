#include "apps/cli/chat_command.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "apps/cli/quantize_option.h"
#include "apps/cli/sampling_options.h"
#include "apps/recipes/chat_answer.h"
#include "apps/recipes/recipe.h"
#include "kiln/io/text_file.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/grammar/json_grammar.h"
#include "kiln/text/tool_calls.h"

namespace kiln::cli {
namespace {

std::atomic<bool> g_interrupted{false};
void on_interrupt(int) { g_interrupted = true; }

// Ctrl-C sets a flag instead of ending the process; without SA_RESTART it
// also interrupts a read at the prompt, which then ends the chat.
void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

struct ChatOptions {
  std::string model, device = "cpu", system, tools_file, tool_choice = "auto", response_format;
  recipes::InferenceOptions loading;
  recipes::CompletionOptions completion;
  models::SamplingFields sampling;  // the flags given; the model's defaults, then kChatFallback, give the rest
};

// `kiln chat`'s sampling where neither the flags nor the model set it.
constexpr models::Sampling kChatFallback{.temperature = 0.7, .top_k = 0};

using json = nlohmann::ordered_json;

// The tools the model may call (OpenAI's list of functions, from a JSON
// file), how it chooses, and the calls of its last reply that await
// their results (/result).
struct Tools {
  json list;  // null: none
  text::ToolChoice choice{text::ToolChoice::Mode::kNone, ""};
  const text::ToolCallFormat* format = nullptr;
  json pending = json::array();
  uint64_t calls_made = 0;

  // --tool-choice's words: auto, required, none, or a function's name.
  static json choice_json(const std::string& word) {
    if (word == "auto" || word == "required" || word == "none") return word;
    return {{"type", "function"}, {"function", {{"name", word}}}};
  }
  // Reads FILE's tools, or "none" to drop them.
  void load(const std::string& file, const std::string& choice_word, const recipes::InferenceModel& model) {
    if (file == "none") {
      list = nullptr;
      choice.mode = text::ToolChoice::Mode::kNone;
      format = nullptr;
      pending = json::array();
      return;
    }
    json given = json::parse(read_text_file(file), nullptr, false);
    KILN_CHECK(given.is_array() && !given.empty(), file, " must hold a JSON array of tools ({\"type\": \"function\", "
               "\"function\": {\"name\", \"description\", \"parameters\"}}), as the chat API takes them");
    for (const json& t : given)
      KILN_CHECK(t.is_object() && t.value("type", json()) == "function" && t.contains("function") &&
                     t["function"].is_object() && t["function"].contains("name") && t["function"]["name"].is_string(),
                 file, ": each tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
    const text::ToolChoice c = text::tool_choice_from_json(choice_json(choice_word), given);
    recipes::CompletionOptions probe;  // a template or a schema the grammar cannot take fails now, not at a reply
    format = recipes::constrain_tool_calls(model, given, c, true, probe);
    list = std::move(given);
    choice = c;
  }
  // The options of a reply that may call them.
  recipes::CompletionOptions constrain(const recipes::InferenceModel& model, recipes::CompletionOptions o) const {
    if (!list.is_null()) recipes::constrain_tool_calls(model, list, choice, true, o);
    return o;
  }
};

// --response-format and /format: "json" (any JSON object), a FILE holding a
// JSON Schema or a whole response_format object as the chat API takes it,
// or "none". The grammar every reply is then constrained by.
std::shared_ptr<const text::Grammar> response_format(const std::string& word) {
  if (word.empty() || word == "none") return nullptr;
  if (word == "json") return text::response_format_grammar({{"type", "json_object"}});
  json given = json::parse(read_text_file(word), nullptr, false);
  KILN_CHECK(given.is_object(), word, " must hold a JSON Schema, or a response_format object ({\"type\": "
             "\"json_schema\", \"json_schema\": {\"schema\": ...}})");
  const bool whole = given.contains("type") && given["type"].is_string() &&
                     (given["type"] == "json_schema" || given["type"] == "json_object");
  return text::response_format_grammar(
      whole ? given : json{{"type", "json_schema"}, {"json_schema", {{"name", "reply"}, {"schema", given}}}});
}

// One reply, streamed to stdout as it is made; Ctrl-C ends it where it is.
std::string reply(recipes::InferenceModel& model, const std::string& prompt, const recipes::CompletionOptions& o) {
  std::string text;
  auto c = model.start_completion(prompt, o);
  for (;;) {
    const std::string piece = c->take_text();
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    text += piece;
    if (c->finished()) break;
    if (g_interrupted.exchange(false)) {
      std::printf(" [stopped]");
      break;
    }
    model.advance_completions({c.get()});
  }
  std::printf("\n");
  return text;
}

int run_chat(const ChatOptions& o) {
  recipes::LoadedModel loaded = recipes::load_for_inference(o.model, Device::parse(o.device), o.loading);
  KILN_CHECK(loaded.kind == recipes::ModelKind::language_model, o.model, " is not a language model");
  recipes::InferenceModel& model = *loaded.model;
  // The model's own system message where --system is not given, and its stop strings (an Ollama Modelfile's).
  const std::string system = o.system.empty() ? model.default_system() : o.system;
  const json opening = system.empty() ? json::array() : json::array({{{"role", "system"}, {"content", system}}});
  json history = opening;
  recipes::CompletionOptions options = o.completion;
  options.stop = model.default_stop();
  options.sampling = models::resolve_sampling(o.sampling, model.sampling_defaults(), kChatFallback);
  models::check_sampling(options.sampling);
  options.grammar = response_format(o.response_format);
  Tools tools;
  if (!o.tools_file.empty()) tools.load(o.tools_file, o.tool_choice, model);
  json hello = history;  // fails now, not at the first reply, if there is no template or it refuses the system turn
  hello.push_back({{"role", "user"}, {"content", "Hello"}});
  model.render_chat_json(hello, tools.list);
  const bool terminal = isatty(STDIN_FILENO);
  if (terminal)
    std::printf("kiln chat: %s. /reset starts over; /tools FILE (or none) sets the tools it may call, /result TEXT "
                "answers a call; /format json|FILE|none constrains replies; Ctrl-C stops a reply; Ctrl-D or Ctrl-C "
                "here quits.\n", o.model.c_str());
  catch_interrupts();
  // The model's turn: a reply, and the calls in it, which then await /result.
  auto respond = [&] {
    const std::string prompt = model.render_chat_json(history, tools.list);
    recipes::CompletionOptions reply_options = tools.constrain(model, options);
    // A reasoning model thinks before a constrained answer or a call, as through kiln serve.
    const recipes::ReasoningStart reasoning = recipes::reason_before_answering(model, prompt, reply_options);
    const std::string text = reply(model, prompt, reply_options);
    json message = {{"role", "assistant"}, {"content", text}};  // as transformers keeps a reply: its template reads it
    if (tools.format) {
      const recipes::ChatAnswer read = recipes::read_chat_answer(text, true, reasoning, tools.format, tools.list);
      if (!read.answer.calls.empty()) {
        json calls = text::tool_calls_json(*tools.format, read.answer.calls, tools.calls_made);
        tools.calls_made += read.answer.calls.size();
        for (const json& call : calls) {  // the arguments on one line
          const std::string& text = call["function"]["arguments"].get_ref<const std::string&>();
          const json arguments = json::parse(text, nullptr, false);
          std::printf("(tool call %s: %s(%s); answer with /result TEXT)\n", call["id"].get<std::string>().c_str(),
                      call["function"]["name"].get<std::string>().c_str(),
                      arguments.is_discarded() ? text.c_str() : arguments.dump().c_str());
        }
        // The chat API's message: the thinking that led to the calls stays with them for the template.
        message = {{"role", "assistant"}, {"content", read.answer.content}, {"tool_calls", calls}};
        if (!read.reasoning.empty()) message["reasoning_content"] = read.reasoning;
        tools.pending = calls;
      }
    }
    history.push_back(std::move(message));
  };
  for (std::string line;;) {
    if (terminal) std::printf("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || g_interrupted) break;
    if (line.empty()) continue;
    const size_t before = history.size();
    const json pending = tools.pending;
    try {
      if (line == "/reset") {
        history = opening;
        tools.pending = json::array();
        std::printf("(conversation cleared)\n");
      } else if (line.rfind("/tools ", 0) == 0) {
        tools.load(line.substr(7), o.tool_choice, model);
        std::printf("(%zu tools)\n", tools.list.is_null() ? size_t(0) : tools.list.size());
      } else if (line.rfind("/format ", 0) == 0) {
        options.grammar = response_format(line.substr(8));
        std::printf("(%s)\n", options.grammar ? "replies constrained" : "replies unconstrained");
      } else if (line.rfind("/result ", 0) == 0) {
        KILN_CHECK(!tools.pending.empty(), "no tool call awaits a result");
        const json call = tools.pending[0];
        tools.pending.erase(tools.pending.begin());
        history.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"name", call["function"]["name"]},
                           {"content", line.substr(8)}});
        if (tools.pending.empty()) respond();  // every call answered: the model goes on
      } else {
        KILN_CHECK(tools.pending.empty(), "the model awaits ", tools.pending.size(),
                   " tool result(s): answer with /result TEXT, or /reset");
        history.push_back({{"role", "user"}, {"content", line}});
        respond();
      }
    } catch (const Error& e) {  // a conversation the template refuses, one past the context, a bad file
      history.erase(history.begin() + long(before), history.end());
      tools.pending = pending;
      std::fprintf(stderr, "kiln chat: %s\n", e.what());
    }
  }
  if (terminal) std::printf("\n");
  return 0;
}

}  // namespace

std::function<int()> add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  o->completion.chat = true;
  o->completion.max_tokens = 512;
  auto* cmd = app.add_subcommand("chat", "chat with a Hugging Face language model in the terminal, in its chat template");
  cmd->add_option("model", o->model, "hf:DIR (a Hugging Face model folder) or gguf:FILE (a GGUF file)")->required();
  add_quantize_option(cmd, o->loading.quantize, "quantize the weights: int8, int8b, int4 or int4z");
  cmd->add_option("--chat-template", o->loading.chat_template,
                  "the template's family instead of the folder's own: " + text::chat_template_list());
  cmd->add_option("--system", o->system, "a system message that opens the conversation");
  add_sampling_options(cmd, o->sampling, "0.7", "0: all");
  cmd->add_option("--max-tokens", o->completion.max_tokens, "the longest reply, in tokens (default 512)");
  cmd->add_option("--seed", o->completion.seed, "sampling seed");
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  cmd->add_option("--tools", o->tools_file, "a JSON file of tools the model may call, as the chat API takes them "
                                            "(also /tools FILE in the chat)");
  cmd->add_option("--tool-choice", o->tool_choice, "auto (default), required, none, or a function's name");
  cmd->add_option("--response-format", o->response_format,
                  "constrain replies: json (any JSON object), or a FILE holding a JSON Schema or a response_format "
                  "object (also /format json|FILE|none in the chat)");
  return [=]() -> int { return *cmd ? run_chat(*o) : -1; };
}

}  // namespace kiln::cli
