// libFuzzer target: arbitrary bytes as a GGUF file's (kiln/io/gguf_parse.h),
// then its metadata as a tokenizer and a chat template (kiln/text/gguf_vocab.h),
// the tokenizer run on a short text both ways. The contract: a header that
// parses, with every tensor inside the bytes, and a tokenizer that works, or
// a kiln::Error; any other exception, a crash, a sanitizer report or an
// allocation past the RSS limit is a bug.
#include <cstdint>
#include <cstdlib>

#include "kiln/core/error.h"
#include "kiln/io/gguf_parse.h"
#include "kiln/text/gguf_vocab.h"
#include "kiln/text/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::GgufHeader h;
  try {
    h = kiln::parse_gguf(data, size);
    for (const auto& t : h.tensors)
      if (h.data_start + t.offset + t.bytes > size) std::abort();
  } catch (const kiln::Error&) {
    return 0;
  }
  try {
    kiln::text::gguf_chat_template(h.metadata);
    const auto tokenizer = kiln::text::HfTokenizer::from_json(kiln::text::gguf_vocab(h.metadata).tokenizer, "fuzz");
    tokenizer.decode(tokenizer.encode("the cat <|im_end|> \xe2\x96\x81 x\n", true), false);
  } catch (const kiln::Error&) {
  }
  return 0;
}
