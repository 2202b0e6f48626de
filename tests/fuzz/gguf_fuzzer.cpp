// libFuzzer target: arbitrary bytes as a GGUF file's (kiln/io/gguf_parse.h).
// The contract: a header that parses, with every tensor inside the bytes, or
// a kiln::Error; any other exception, a crash, a sanitizer report or an
// allocation past the RSS limit is a bug.
#include <cstdint>
#include <cstdlib>

#include "kiln/core/error.h"
#include "kiln/io/gguf_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::GgufHeader h = kiln::parse_gguf(data, size);
    for (const auto& t : h.tensors)
      if (h.data_start + t.offset + t.bytes > size) std::abort();
  } catch (const kiln::Error&) {
  }
  return 0;
}
