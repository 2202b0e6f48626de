// libFuzzer target: arbitrary bytes as a tokenizer.json, and, when one loads,
// as text to encode (alone, and as a pair's second text) and ids to decode. The contract: loading gives a
// tokenizer or throws kiln::Error naming the defect; encoding and decoding
// give results or throw kiln::Error. Any other exception, a crash, or a
// sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"
#include "kiln/text/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = kiln::text::HfTokenizer::from_json_text(bytes, "fuzz.json");
    for (const std::string& text : {std::string("Hello, world! caf\xC3\xA9 \xF0\x9F\x98\x80 12345  \r\n"), bytes}) {
      const auto ids = tok.encode(text);
      tok.decode(ids, true);
      tok.decode(ids, false);
      kiln::text::DecodeStream stream(tok);
      for (int32_t id : ids) stream.step(id);
    }
    // The bytes as the second text of a pair, cut to 16 tokens: ids and types of one length, within the bound.
    const auto pair = tok.encode_pair("a query", bytes, 16);
    if (pair.ids.size() != pair.types.size() || pair.ids.size() > 16) std::abort();
  } catch (const kiln::Error&) {
  } catch (...) {
    std::abort();
  }
  return 0;
}
