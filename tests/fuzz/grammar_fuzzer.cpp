// libFuzzer target: arbitrary bytes as a GBNF grammar, parsed and, when it
// parses, matched against probe texts fed whole and byte by byte (tokens that
// end inside UTF-8 characters). The contract: a grammar parses or throws
// kiln::Error naming the place; matching answers or throws kiln::Error (too
// ambiguous). Any other exception, a crash, a hang or a sanitizer report is a bug.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "kiln/core/error.h"
#include "kiln/text/grammar/gbnf.h"
#include "kiln/text/grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    auto grammar = std::make_shared<const kiln::text::Grammar>(kiln::text::parse_gbnf(source));
    for (const std::string probe : {std::string("{\"a\": [1, 2]}"), std::string("ab\xc3\xa9\xf0\x9f\x98\x80"),
                                    source.substr(0, 64)}) {
      kiln::text::GrammarMatcher whole(grammar), bytes(grammar);
      whole.accept(probe);
      whole.can_end();
      for (char c : probe)
        if (!bytes.accept(std::string(1, c))) break;
      bytes.can_end();
    }
  } catch (const kiln::Error&) {
  } catch (...) {
    std::abort();
  }
  return 0;
}
