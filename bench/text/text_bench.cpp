// Text speed: a chat template rendering a long conversation, and a
// tokenizer encoding many texts, each timed on one thread (bench/text/run.sh
// times transformers and tokenizers on the same work in the same run).
//   kiln_text_bench template TEMPLATE.jinja TURNS REPEATS   -> {"render_us": mean}
//   kiln_text_bench tokenize tokenizer.json TEXTS.json REPEATS -> {"texts_per_s", "tokens_per_s"}
//   kiln_text_bench grammar VOCAB.gguf TEXTS.json REPEATS     -> {"mask_ms": mean per token, "first_request_ms"...}
//   kiln_text_bench compile SCHEMA.json TOOLS.json REPEATS    -> {"schema_ms", "tools_ms"}: a JSON schema's
//     grammar, and a Hermes forced-call grammar of OpenAI's tools, from JSON to a parsed grammar
// TEXTS.json: a JSON list of strings. `grammar` walks each text (JSON
// objects) token by token through the JSON-mode grammar, computing the mask
// over the whole vocabulary at every step, as constrained decoding does.
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_map>

#include "kiln/io/gguf.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/gguf_vocab.h"
#include "kiln/text/grammar/json_grammar.h"
#include "kiln/text/grammar/matcher.h"
#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/hf_tokenizer.h"
#include "kiln/text/tool_calls.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string read(const char* path) {
  std::stringstream ss;
  ss << std::ifstream(path, std::ios::binary).rdbuf();
  return ss.str();
}

// The conversation both engines render: a system turn, then TURNS user/assistant turns.
nlohmann::ordered_json conversation(int turns) {
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  m.push_back({{"role", "system"}, {"content", "You are a helpful assistant. Answer in one paragraph."}});
  for (int i = 0; i < turns; ++i)
    m.push_back({{"role", i % 2 ? "assistant" : "user"},
                 {"content", "Turn " + std::to_string(i) + ": tell me about the weather in a city, briefly.\n"}});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s template FILE TURNS REPEATS | tokenize TOKENIZER.json TEXTS.json REPEATS | grammar VOCAB.gguf "
                 "TEXTS.json REPEATS | compile SCHEMA.json TOOLS.json REPEATS\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int repeats = std::atoi(argv[4]);
  try {
    if (mode == "template") {
      auto t = kiln::text::ChatTemplate::from_jinja(read(argv[2]));
      t.tokens = {"<s>", "</s>"};
      const auto messages = conversation(std::atoi(argv[3]));
      size_t bytes = t.render_json(messages, nullptr, true).size();  // warm-up
      const auto start = Clock::now();
      for (int r = 0; r < repeats; ++r) bytes += t.render_json(messages, nullptr, true).size();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / repeats;
      std::printf("{\"engine\": \"kiln\", \"render_us\": %.1f, \"bytes\": %zu}\n", us, bytes / size_t(repeats + 1));
      return 0;
    }
    if (mode == "compile") {
      const auto schema = nlohmann::ordered_json::parse(read(argv[2]));
      const auto tools = nlohmann::ordered_json::parse(read(argv[3]));
      const auto& hermes = kiln::text::tool_call_formats().front();
      const kiln::text::ToolChoice required{kiln::text::ToolChoice::Mode::kRequired, ""};
      size_t rules = 0;
      auto start = Clock::now();
      for (int r = 0; r < repeats; ++r) rules += kiln::text::json_schema_grammar(schema)->rules.size();
      const double schema_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / repeats;
      start = Clock::now();
      for (int r = 0; r < repeats; ++r)
        rules += kiln::text::tool_call_constraint(hermes, tools, required, true).grammar->rules.size();
      const double tools_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / repeats;
      std::printf("{\"engine\": \"kiln\", \"schema_ms\": %.3f, \"tools_ms\": %.3f, \"rules\": %zu}\n", schema_ms,
                  tools_ms, rules / size_t(2 * repeats));
      return 0;
    }
    const auto texts = nlohmann::json::parse(read(argv[3])).get<std::vector<std::string>>();
    if (mode == "grammar") {
      const auto tok = kiln::text::HfTokenizer::from_json(
          kiln::text::gguf_vocab(kiln::GgufFile::open(argv[2]).metadata()).tokenizer, argv[2]);
      std::vector<std::string> bytes(size_t(tok.vocab_size()));
      for (int32_t id = 0; id < int32_t(bytes.size()); ++id)
        if (!tok.is_special(id)) bytes[size_t(id)] = tok.token_bytes(id);
      const auto trie_start = Clock::now();
      const kiln::text::TokenTrie vocab(bytes);
      const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - trie_start).count();
      size_t steps = 0, allowed_total = 0;
      const auto start = Clock::now();
      for (int r = 0; r < repeats; ++r)
        for (const auto& text : texts) {
          kiln::text::GrammarMatcher m(kiln::text::json_object_grammar());
          for (int32_t id : tok.encode(text, false)) {
            for (uint64_t word : m.allowed_tokens(vocab).words()) allowed_total += size_t(std::popcount(word));
            ++steps;
            if (!m.accept(bytes[size_t(id)])) throw std::runtime_error("the grammar refused a token of " + text);
          }
        }
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / double(steps);
      // As a server meets them, each repeat from empty caches (the texts' first request): masks kept by state
      // only (each new state walks the whole trie), and MaskCache's (a new state: the union of stack masks).
      auto first_request_ms = [&](bool by_stacks) {
        const auto cached_start = Clock::now();
        for (int r = 0; r < repeats; ++r) {
          kiln::text::MaskCache cache;
          std::unordered_map<std::string, kiln::text::TokenSet> by_state;
          for (const auto& text : texts) {
            kiln::text::GrammarMatcher m(kiln::text::json_object_grammar());
            for (int32_t id : tok.encode(text, false)) {
              bool ok;
              if (by_stacks) {
                ok = cache.allowed(m, vocab)->contains(size_t(id));
              } else {
                auto [it, added] = by_state.try_emplace(m.state_key());
                if (added) it->second = m.allowed_tokens(vocab);
                ok = it->second.contains(size_t(id));
              }
              if (!ok || !m.accept(bytes[size_t(id)])) throw std::runtime_error("a mask refused a token of " + text);
            }
          }
        }
        return std::chrono::duration<double, std::milli>(Clock::now() - cached_start).count() / double(steps);
      };
      const double by_state_ms = first_request_ms(false), cached_ms = first_request_ms(true);
      std::printf("{\"engine\": \"kiln\", \"vocab\": %lld, \"trie_nodes\": %zu, \"trie_ms\": %.1f, \"steps\": %zu, "
                  "\"mask_ms\": %.3f, \"first_request_by_state_ms\": %.3f, \"first_request_ms\": %.3f, "
                  "\"mean_allowed\": %.0f}\n",
                  (long long)tok.vocab_size(), vocab.nodes().size(), trie_ms, steps, ms, by_state_ms, cached_ms,
                  double(allowed_total) / double(steps));
      return 0;
    }
    const auto tok = kiln::text::HfTokenizer::from_file(argv[2]);
    size_t tokens = 0;
    for (const auto& s : texts) tokens += tok.encode(s, false).size();  // warm-up (the BPE cache too, as tokenizers')
    const auto start = Clock::now();
    for (int r = 0; r < repeats; ++r)
      for (const auto& s : texts) tokens += tok.encode(s, false).size();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("{\"engine\": \"kiln\", \"texts_per_s\": %.0f, \"tokens_per_s\": %.0f}\n", texts.size() * repeats / s,
                double(tokens) / (repeats + 1) * repeats / s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_text_bench: %s\n", e.what());
    return 1;
  }
}
