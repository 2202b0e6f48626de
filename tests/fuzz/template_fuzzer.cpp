// libFuzzer target: arbitrary bytes as a chat template, parsed and, when it
// parses, rendered over a conversation with tools. The contract: a template
// parses or throws kiln::Error naming the line; rendering gives text or
// throws kiln::Error (the template's own raise_exception, a type error, a
// limit reached). Any other exception, a crash, a hang or a sanitizer
// report is a bug. The limits are lowered so that a runaway loop ends fast.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"
#include "kiln/text/jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi {{ x }}"},
                 {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                  "function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    const kiln::text::jinja::Template t(source);
    kiln::text::jinja::RenderOptions options;
    options.limits.max_steps = 20000;
    options.limits.max_output_bytes = 1 << 20;
    options.now_unix_seconds = 0;
    t.render(context, options);
  } catch (const kiln::Error&) {
  } catch (...) {
    std::abort();
  }
  return 0;
}
