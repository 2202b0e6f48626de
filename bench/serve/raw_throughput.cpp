// The served model's raw batched throughput in process: batches of 64
// images (image classifiers) or texts (text classifiers) through the same
// InferenceModel the server runs, no HTTP. The serving benchmark
// (bench/serve/serve_bench.sh) compares its requests/s with this.
//   bench_serve_raw RUN_DIR [BATCH] [fp32|bf16] [cpu|cuda]   (bf16: as kiln serve --precision bf16)
#include <chrono>
#include <cstdio>
#include <string>

#include "apps/recipes/recipe.h"
#include "apps/serve/precision.h"
#include "kiln/backend/factory.h"
#include "kiln/cpu/runtime_defaults.h"

int main(int argc, char** argv) {
  using namespace kiln;
  apply_runtime_defaults(argv);  // the same OpenMP and OpenBLAS settings as kiln serve
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_serve_raw RUN_DIR [BATCH] [fp32|bf16] [cpu|cuda]\n");
    return 2;
  }
  const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 64;
  const std::string precision = argc > 3 ? argv[3] : "fp32";
  KILN_CHECK(precision == "fp32" || precision == "bf16", "bench_serve_raw: precision is fp32 or bf16, got ", precision);
  const Device device = Device::parse(argc > 4 ? argv[4] : "cpu");
  recipes::LoadedModel m = recipes::load_for_inference(argv[1], device);
  m.model = serve::with_autocast(std::move(m.model), precision == "bf16" ? DType::bf16 : DType::f32);
  const bool text = m.kind == recipes::ModelKind::text_classifier;
  Tensor pixels = full({batch, 1, 28, 28}, 0.5, DType::f32, Device::cpu());
  // A text of the benchmark's length (bench/serve/serve_bench.sh sends the same), tokenized per batch as served.
  const std::vector<std::string> texts(size_t(batch), "You will be successful in your work, but only after a "
                                                      "long journey over water and a meeting with an old friend.");
  auto run_batch = [&] { text ? m.model->classify_tokens(m.model->encode_texts(texts)) : m.model->classify_images(pixels); };
  for (int i = 0; i < 5; ++i) run_batch();  // warm up
  const auto start = std::chrono::steady_clock::now();
  int64_t images = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    run_batch();
    images += batch;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("raw in-process throughput (%s, batches of %lld, %s, %s): %.1f %s/s\n", m.recipe.c_str(),
              (long long)batch, precision.c_str(), device.str().c_str(), double(images) / s, text ? "texts" : "images");
  return 0;
}
