#include "apps/cli/chat_command.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <unistd.h>

#include "apps/cli/quantize_option.h"
#include "apps/recipes/recipe.h"
#include "kiln/text/chat_template.h"

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
  std::string model, device = "cpu", system;
  recipes::InferenceOptions loading;
  recipes::CompletionOptions completion;
};

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
  std::vector<text::ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  auto opening = history;  // fails now, not at the first reply, if there is no template or it refuses the system turn
  opening.push_back({"user", "Hello"});
  loaded.model->render_chat(opening);
  const bool terminal = isatty(STDIN_FILENO);
  if (terminal) std::printf("kiln chat: %s. /reset starts over; Ctrl-C stops a reply; Ctrl-D or Ctrl-C here quits.\n",
                            o.model.c_str());
  catch_interrupts();
  for (std::string line;;) {
    if (terminal) std::printf("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || g_interrupted) break;
    if (line.empty()) continue;
    if (line == "/reset") {
      history.resize(o.system.empty() ? 0 : 1);
      std::printf("(conversation cleared)\n");
      continue;
    }
    history.push_back({"user", line});
    std::string prompt;
    try {
      prompt = loaded.model->render_chat(history);
      history.push_back({"assistant", reply(*loaded.model, prompt, o.completion)});
    } catch (const Error& e) {  // a conversation the template refuses, or one past the context
      history.pop_back();
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
  o->completion.temperature = 0.7;
  o->completion.top_k = 0;
  o->completion.max_tokens = 512;
  auto* cmd = app.add_subcommand("chat", "chat with a Hugging Face language model in the terminal, in its chat template");
  cmd->add_option("model", o->model, "hf:DIR (a Hugging Face model folder) or gguf:FILE (a GGUF file)")->required();
  add_quantize_option(cmd, o->loading.quantize, "quantize the weights: int8, int8b, int4 or int4z");
  cmd->add_option("--chat-template", o->loading.chat_template,
                  "the template's family instead of the folder's own: " + text::chat_template_list());
  cmd->add_option("--system", o->system, "a system message that opens the conversation");
  cmd->add_option("--temperature", o->completion.temperature, "softmax temperature (0: greedy; default 0.7)");
  cmd->add_option("--top-p", o->completion.top_p, "nucleus sampling mass (default 1: all)");
  cmd->add_option("--max-tokens", o->completion.max_tokens, "the longest reply, in tokens (default 512)");
  cmd->add_option("--seed", o->completion.seed, "sampling seed");
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
  return [=]() -> int { return *cmd ? run_chat(*o) : -1; };
}

}  // namespace kiln::cli
