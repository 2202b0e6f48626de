// ollama:NAME (models/hf/ollama_store.h) against a store made here as
// `ollama pull` leaves one.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "hf_test_util.h"
#include "kiln/core/error.h"
#include "models/hf/hf_model.h"

namespace kiln {
namespace {

// ollama:NAME, as `ollama pull` leaves a model: its manifest's model layer
// names a GGUF blob by digest. Names parse as Ollama's do; a missing model,
// a name that would leave the store, or an adapter layer is a clear error.
TEST(OllamaStore, NamesResolveToTheirStoresGgufBlob) {
  namespace fs = std::filesystem;
  const fs::path store = fs::temp_directory_path() / ("kiln-ollama-" + std::to_string(::getpid()));
  fs::remove_all(store);
  const std::string digest(64, 'a'), other(64, 'b');
  fs::create_directories(store / "blobs");
  fs::copy_file(hf_test::fixture("gguf-tiny") + "/model-q8_0.gguf", store / "blobs" / ("sha256-" + digest));
  auto manifest = [&](const fs::path& at, const std::string& layers) {
    fs::create_directories((store / "manifests" / at).parent_path());
    std::ofstream(store / "manifests" / at) << R"({"schemaVersion": 2, "layers": [)" << layers << "]}";
  };
  const std::string model =
      R"({"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:)" + digest + R"("})";
  const std::string params =
      R"({"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:)" + other + R"("})";
  manifest("registry.ollama.ai/library/tiny/latest", model + ", " + params);
  manifest("registry.ollama.ai/someone/tiny/q8", model);
  manifest("hf.co/org/tiny-GGUF/Q8_0", model);
  manifest("registry.ollama.ai/library/adapted/latest",
           model + R"(, {"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:)" + other + R"("})");
  manifest("registry.ollama.ai/library/lost/latest",
           R"({"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:)" + other + R"("})");
  ::setenv("OLLAMA_MODELS", store.c_str(), 1);
  const std::string blob = (store / "blobs" / ("sha256-" + digest)).string();
  for (const char* name :
       {"ollama:tiny", "ollama:tiny:latest", "ollama:someone/tiny:q8", "ollama:hf.co/org/tiny-GGUF:Q8_0"})
    EXPECT_EQ(models::hf_folder(name), blob) << name;
  EXPECT_EQ(models::hf_model_kind(models::read_hf_config(*models::hf_folder("ollama:tiny"))), "causal");
  auto error_of = [](const std::string& spec) {
    try {
      models::hf_folder(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("ollama:nope").find("`ollama pull nope`"), std::string::npos) << error_of("ollama:nope");
  EXPECT_NE(error_of("ollama:lost").find("is missing from the store"), std::string::npos);
  EXPECT_NE(error_of("ollama:adapted").find("LoRA adapter"), std::string::npos);
  for (const char* bad : {"ollama:../etc/passwd", "ollama:a/b/c/d", "ollama:tiny:..", "ollama:.hidden", "ollama:"})
    EXPECT_NE(error_of(bad).find("is not a model name"), std::string::npos) << bad << ": " << error_of(bad);
  ::unsetenv("OLLAMA_MODELS");
  fs::remove_all(store);
}

}  // namespace
}  // namespace kiln
