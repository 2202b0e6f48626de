// libFuzzer target: arbitrary bytes as a GGUF file's (kiln/io/gguf_parse.h),
// then its metadata and tensors as a model's config.json
// (models/hf/gguf_architectures.h: the architecture's row, its keys, RoPE
// scaling from rope_freqs/rope_factors vectors, each tensor's transformers
// name) and as a tokenizer and a chat template (kiln/text/gguf_vocab.h), the
// tokenizer run on a short text both ways. The contract: a header that
// parses, with every tensor inside the bytes, a config, and a tokenizer that
// works, or a kiln::Error; any other exception, a crash, a sanitizer report
// or an allocation past the RSS limit is a bug. The bytes are also an
// Ollama model name (models/hf/ollama_store.h) looked up in an empty store:
// always an error, never a path; and, where they are JSON, a params layer.
// The metadata's general.sampling.* are read as sampling defaults.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"
#include "kiln/io/gguf_parse.h"
#include "kiln/text/gguf_vocab.h"
#include "kiln/text/hf_tokenizer.h"
#include "models/hf/gguf_architectures.h"
#include "models/hf/ollama_store.h"
#include "models/hf/sampling_defaults.h"

namespace {

// The config the file's keys and RoPE vectors make, and each tensor's transformers name.
void read_config(const kiln::GgufHeader& h, const uint8_t* data) {
  try {
    kiln::models::hf_config_from_gguf(kiln::models::GgufContents::of_bytes(h, data));
  } catch (const kiln::Error&) {
  }
  try {
    const kiln::models::GgufArchitecture& arch = kiln::models::gguf_architecture(h.metadata);
    for (const auto& t : h.tensors) kiln::models::gguf_hf_name(arch, t.name);
  } catch (const kiln::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool empty_store = setenv("OLLAMA_MODELS", "/nonexistent/kiln-fuzz-ollama-store", 1) == 0;
  try {
    kiln::models::ollama_model_file(std::string(reinterpret_cast<const char*>(data), std::min<size_t>(size, 512)));
    if (empty_store) std::abort();  // nothing is in the store
  } catch (const kiln::Error&) {
  }
  // The bytes as an Ollama params layer.
  if (const auto params = nlohmann::json::parse(data, data + size, nullptr, false); !params.is_discarded()) {
    try {
      kiln::models::ollama_params(params, "fuzz");
    } catch (const kiln::Error&) {
    }
  }
  kiln::GgufHeader h;
  try {
    h = kiln::parse_gguf(data, size);
    for (const auto& t : h.tensors)
      if (h.data_start + t.offset + t.bytes > size) std::abort();
  } catch (const kiln::Error&) {
    return 0;
  }
  read_config(h, data);
  try {
    kiln::models::gguf_sampling(h.metadata, "fuzz");
  } catch (const kiln::Error&) {
  }
  try {
    kiln::text::gguf_chat_template(h.metadata);
    const auto tokenizer = kiln::text::HfTokenizer::from_json(kiln::text::gguf_vocab(h.metadata).tokenizer, "fuzz");
    tokenizer.decode(tokenizer.encode("the cat <|im_end|> \xe2\x96\x81 x\n", true), false);
  } catch (const kiln::Error&) {
  }
  return 0;
}
