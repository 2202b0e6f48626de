// ollama:NAME (models/hf/ollama_store.h) against a store made here as
// `ollama pull` leaves one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hf_test_util.h"
#include "kiln/core/error.h"
#include "models/hf/hf_model.h"
#include "models/hf/ollama_store.h"

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
  const std::string system =
      R"({"mediaType": "application/vnd.ollama.image.system", "digest": "sha256:)" + std::string(64, 'c') + R"("})";
  std::ofstream(store / "blobs" / ("sha256-" + other)) << R"({"temperature": 0.6, "stop": ["<|im_end|>"]})";
  std::ofstream(store / "blobs" / ("sha256-" + std::string(64, 'c'))) << "You are a pirate.";
  manifest("registry.ollama.ai/library/tiny/latest", model + ", " + params + ", " + system);
  manifest("registry.ollama.ai/someone/tiny/q8", model);
  manifest("hf.co/org/tiny-GGUF/Q8_0", model);
  manifest("registry.ollama.ai/library/adapted/latest",
           model + R"(, {"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:)" + other + R"("})");
  manifest(
      "registry.ollama.ai/library/lost/latest",
      R"({"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:)" + std::string(64, 'd') + R"("})");
  ::setenv("OLLAMA_MODELS", store.c_str(), 1);
  const std::string blob = (store / "blobs" / ("sha256-" + digest)).string();
  for (const char* name :
       {"ollama:tiny", "ollama:tiny:latest", "ollama:someone/tiny:q8", "ollama:hf.co/org/tiny-GGUF:Q8_0"})
    EXPECT_EQ(models::hf_folder(name), blob) << name;
  EXPECT_EQ(models::hf_model_kind(models::read_hf_config(*models::hf_folder("ollama:tiny"))), "causal");
  // The params and system layers, as `ollama run` applies them: over the file's own defaults.
  const models::OllamaDefaults d = models::ollama_model("tiny").defaults;
  EXPECT_EQ(d.sampling.temperature, 0.6);
  EXPECT_EQ(d.stop, std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(d.system, "You are a pirate.");
  models::HfCausalLm lm;
  lm.sampling_defaults.temperature = 1.5, lm.sampling_defaults.top_p = 0.9;
  models::apply_store_defaults("ollama:tiny", lm);
  EXPECT_EQ(models::sampling_fields_text(lm.sampling_defaults), "temperature 0.6, top_p 0.9");
  EXPECT_EQ(lm.default_stop, d.stop);
  EXPECT_EQ(lm.default_system, d.system);
  EXPECT_TRUE(models::ollama_model("someone/tiny:q8").defaults.system.empty());
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
  manifest("registry.ollama.ai/library/odd/latest",
           R"({"mediaType": 5}, {"mediaType": "application/vnd.ollama.image.model", "digest": 7})");
  EXPECT_NE(error_of("ollama:odd").find("has no sha256 digest"), std::string::npos) << error_of("ollama:odd");
  for (const char* bad : {"ollama:../etc/passwd", "ollama:a/b/c/d", "ollama:tiny:..", "ollama:.hidden", "ollama:"})
    EXPECT_NE(error_of(bad).find("is not a model name"), std::string::npos) << bad << ": " << error_of(bad);
  ::unsetenv("OLLAMA_MODELS");
  fs::remove_all(store);
}

// A params layer as Ollama writes a Modelfile's PARAMETERs: the sampling
// fields and stop strings; samplers Kiln does not run are named; bad values
// are errors naming the blob.
TEST(OllamaStore, AParamsLayerIsReadAsOllamaAppliesIt) {
  const auto d = models::ollama_params(nlohmann::json::parse(R"({"temperature": 0.7, "top_k": 20, "top_p": 0.8,
      "min_p": 0.05, "repeat_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": 0.25,
      "stop": ["<|im_start|>", "<|im_end|>"], "num_ctx": 8192, "mirostat": 2, "typical_p": 1.0})"),
                                       "blob");
  EXPECT_EQ(models::sampling_fields_text(d.sampling),
            "temperature 0.7, top_k 20, top_p 0.8, min_p 0.05, repetition_penalty 1.1, repeat_last_n 64, "
            "presence_penalty 0.5, frequency_penalty 0.25; not applied: mirostat 2");
  EXPECT_EQ(d.stop, (std::vector<std::string>{"<|im_start|>", "<|im_end|>"}));
  EXPECT_EQ(models::ollama_params(nlohmann::json::parse(R"({"repeat_penalty": 1.2, "repeat_last_n": -1})"), "blob")
                .sampling.repetition_window,
            -1);
  for (const char* bad : {R"([])", R"({"temperature": "hot"})", R"({"top_k": 2.5})", R"({"top_p": 0})",
                          R"({"stop": "x"})", R"({"stop": [1]})", R"({"stop": [""]})"}) {
    try {
      models::ollama_params(nlohmann::json::parse(bad), "BLOB");
      ADD_FAILURE() << bad << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BLOB"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
