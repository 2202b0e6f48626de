// libFuzzer target: arbitrary bytes as a fine-tuning JSON Lines file
// (apps/recipes/sft_data.h), encoded with the Llama fixture's tokenizer and
// the chatml template, and as classification data ({"text", "label"}).
// The contract: examples, or a kiln::Error naming the
// line and what is wrong with it. Any other exception, a crash, or a
// sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "apps/recipes/sft_data.h"
#include "kiln/core/error.h"

// The build passes the source folder unquoted (-DKILN_SOURCE_DIR=/path).
#define KILN_STRING(x) #x
#define KILN_EXPAND(x) KILN_STRING(x)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln::text::HfTokenizer tokenizer =
      kiln::text::HfTokenizer::from_file(KILN_EXPAND(KILN_SOURCE_DIR) "/tests/hf/fixtures/llama-gqa/tokenizer.json");
  static const kiln::text::ChatTemplate chat = kiln::text::chat_template_named("chatml");
  kiln::recipes::SftEncoding encoding;
  encoding.tokenizer = &tokenizer;
  encoding.chat = &chat;
  encoding.eos = 1;
  encoding.max_seq_len = 64;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::recipes::parse_labelled_lines(text, "fuzz.jsonl");
  } catch (const kiln::Error&) {
  } catch (...) {
    std::abort();
  }
  try {
    const auto d = kiln::recipes::parse_sft_lines(text, "fuzz.jsonl", encoding);
    for (const auto& e : d.examples)
      if (e.ids.size() != e.learn.size() || e.ids.size() > 64 || e.learned() == 0) std::abort();
  } catch (const kiln::Error&) {
  } catch (...) {
    std::abort();
  }
  return 0;
}
