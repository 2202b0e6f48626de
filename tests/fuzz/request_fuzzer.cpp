// libFuzzer target: arbitrary bytes as the body of every request kiln serve
// parses (OpenAI's, llama-server's, Ollama's), and a chat's messages through every chat template; a chat's
// tools compiled into each tool-call format's forced-call grammar, and the
// body read as a model's answer in each format. The contract: a parser
// returns a valid request or throws HttpError(400) (kiln::Error for a
// grammar it cannot make); the reader always answers; any other exception,
// a crash, or a sanitizer report is a bug. Run by CTest for a bounded time (tests/fuzz/fuzz_tests.cmake).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "apps/serve/anthropic_requests.h"
#include "apps/serve/ollama_requests.h"
#include "apps/serve/requests.h"
#include "apps/serve/responses_requests.h"
#include "kiln/core/error.h"
#include "kiln/text/base64.h"
#include "kiln/text/chat_template.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/tool_calls.h"

namespace {

template <typename F>
void expect_valid_or_400(F parse) {
  try {
    parse();
  } catch (const kiln::serve::HttpError& e) {
    if (e.status != 400) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  // As JSON, and as a JSON header (up to the first newline) followed by tensor bytes.
  const size_t newline = body.find('\n');
  const std::string header_length = std::to_string(newline == std::string::npos ? size : newline + 1);
  for (const auto length : {std::optional<std::string_view>(), std::optional<std::string_view>(header_length)})
    expect_valid_or_400([&] {
      auto r = kiln::serve::parse_infer(body, 64, length);
      if (int64_t(r.pixels.size()) != r.images * 784 || r.images < 1 || r.images > 64 || r.outputs.empty() ||
          !std::all_of(r.pixels.begin(), r.pixels.end(), [](float v) { return std::isfinite(v); }))
        std::abort();
    });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_classify(body, 64);
    if (r.texts.empty() || r.texts.size() > 64) std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_rerank(body);
    if (r.documents.empty() || int64_t(r.documents.size()) > kiln::serve::kMaxRerankDocuments ||
        (r.top_n && *r.top_n < 1))
      std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_embeddings(body);
    if (r.texts.empty() || int64_t(r.texts.size()) > kiln::serve::kMaxEmbeddingInputs) std::abort();
    const std::string b64 = kiln::text::base64_encode(body.data(), body.size());
    if (b64.size() != (body.size() + 2) / 3 * 4 || kiln::text::base64_decode(b64) != body) std::abort();
  });
  for (const bool counting : {false, true})
    expect_valid_or_400([&] {
      auto r = kiln::serve::parse_anthropic_messages(body, counting);
      if (r.messages.empty() || r.max_tokens < 1 || r.max_tokens > 4096 || r.n != 1) std::abort();
    });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_tei_predict(body, 64);
    if (r.texts.empty() || r.texts.size() > 64 || (r.top_k && *r.top_k < 1)) std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_score(body);
    if (r.pairs.empty() || int64_t(r.pairs.size()) > kiln::serve::kMaxRerankDocuments) std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_openai_responses(body);
    if (r.messages.empty() || r.max_tokens < 1 || r.max_tokens > 4096 || r.n != 1) std::abort();
  });
  for (auto parse : {kiln::serve::parse_tei_embed, kiln::serve::parse_llama_embedding})
    expect_valid_or_400([&] {
      auto r = parse(body);
      if (r.texts.empty() || int64_t(r.texts.size()) > kiln::serve::kMaxEmbeddingInputs || r.normalization < -1)
        std::abort();
    });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_completion(body);
    if (r.max_tokens < 0 || r.max_tokens > 4096 || r.prompt_count() == 0 ||
        int64_t(r.prompt_count()) > kiln::serve::kMaxPrompts || (!r.prompts.empty() && !r.prompt_ids.empty()))
      std::abort();
    try {  // whatever the request sets, the sampler takes
      kiln::models::check_sampling(kiln::models::resolve_sampling(r.sampling, {}, {}));
    } catch (const kiln::Error&) {
      std::abort();
    }
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_llama_infill(body);
    if (r.max_tokens < 0 || r.max_tokens > 4096 || int64_t(r.extra.size()) > kiln::serve::kMaxInfillChunks)
      std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_llama_completion(body);
    if (r.max_tokens < 0 || r.max_tokens > 4096) std::abort();
    try {
      kiln::models::check_sampling(kiln::models::resolve_sampling(r.sampling, {}, kiln::serve::kLlamaServerSampling));
    } catch (const kiln::Error&) {
      std::abort();
    }
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_tokenize(body);
    if (r.chat && r.chat->messages.empty()) std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_detokenize(body);
    if (r.tokens.size() > 1000000 || std::any_of(r.tokens.begin(), r.tokens.end(), [](int32_t t) { return t < 0; }))
      std::abort();
  });
  // Ollama's requests, read into the OpenAI endpoints' own.
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_ollama_chat(body);
    if (r.messages.empty() || r.max_tokens < 1 || r.max_tokens > 4096) std::abort();
  });
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_ollama_generate(body);
    if (r.chat.messages.empty() || r.chat.max_tokens < 1 || r.chat.max_tokens > 4096) std::abort();
  });
  for (const bool older : {false, true})
    expect_valid_or_400([&] {
      auto r = kiln::serve::parse_ollama_embed(body, older);
      if (r.texts.empty()) std::abort();
    });
  // A chat request's messages, rendered by every template: text, or a
  // kiln::Error for a conversation the template refuses.
  expect_valid_or_400([&] {
    auto r = kiln::serve::parse_chat(body);
    if (r.messages.empty() || r.max_tokens < 1 || r.max_tokens > 4096 || r.top_logprobs < 0 || r.top_logprobs > 20)
      std::abort();
    for (const auto& name : kiln::text::chat_template_names()) try {
        kiln::text::chat_template_named(name).render_json(r.messages, r.tools, true);
      } catch (const kiln::Error&) {
      }
    // The calls' arguments in either form a template takes.
    kiln::text::arguments_as_taken(kiln::text::arguments_as_taken(r.messages, true), false);
    if (r.tools.is_null()) return;
    for (const auto& format : kiln::text::tool_call_formats())
      for (const bool triggered : {false, true}) try {
          kiln::text::parse_gbnf(
              kiln::text::tool_call_gbnf(format, r.tools, r.tool_choice.name, r.parallel_tool_calls, triggered));
        } catch (const kiln::Error&) {
        }
  });
  // The body as a model's answer, whole and cut short, in every format (XML-style values read by these types).
  static const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"},
      "b": {"type": "boolean"}, "o": {"type": "object"}, "a": {"type": "array", "items": {"type": "object",
      "properties": {"k": {"type": "string"}, "m": {"type": "object", "properties": {"x": {"type": "number"}}}}}}}}}}])");
  for (const auto& format : kiln::text::tool_call_formats()) {
    const auto whole = kiln::text::read_tool_answer(format, body, true, tools);
    const auto part = kiln::text::read_tool_answer(format, std::string_view(body).substr(0, size / 2), false, tools);
    if (whole.content.size() > size || part.calls.size() > whole.calls.size()) std::abort();
  }
  return 0;
}
