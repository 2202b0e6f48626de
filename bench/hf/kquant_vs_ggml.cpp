// Kiln's decoding product against llama.cpp's on the same bytes: for each
// GGUF block type, random blocks (f16 scales small and finite) times one
// random activation row, through Kiln's path in use and through ggml's
// vec_dot (the activations quantized by ggml's own from_float). Prints, per
// type, how many of the outputs have the same bits. Built and run by
// bench/hf/kquant_vs_ggml.sh against a llama.cpp build.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kiln/core/half.h"
#include "kiln/cpu/quantized_matmul.h"
#include "kiln/io/gguf.h"
#include "kiln/io/gguf_quants.h"

using namespace kiln;

int main() {
  ggml_cpu_init();
  const int64_t N = 64, K = 1024;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Type {
    GgufType kiln;
    ggml_type ggml;
    std::vector<int> halves;  // where each block keeps its f16 scale and minimums
  };
  const Type types[] = {{GgufType::Q2_K, GGML_TYPE_Q2_K, {80, 82}}, {GgufType::Q3_K, GGML_TYPE_Q3_K, {108}},
                        {GgufType::Q4_K, GGML_TYPE_Q4_K, {0, 2}},   {GgufType::Q5_K, GGML_TYPE_Q5_K, {0, 2}},
                        {GgufType::Q6_K, GGML_TYPE_Q6_K, {208}},    {GgufType::Q8_0, GGML_TYPE_Q8_0, {0}},
                        {GgufType::Q4_0, GGML_TYPE_Q4_0, {0}},      {GgufType::Q4_1, GGML_TYPE_Q4_1, {0, 2}},
                        {GgufType::Q5_0, GGML_TYPE_Q5_0, {0}},      {GgufType::Q5_1, GGML_TYPE_Q5_1, {0, 2}},
                        {GgufType::IQ4_NL, GGML_TYPE_IQ4_NL, {0}},  {GgufType::IQ4_XS, GGML_TYPE_IQ4_XS, {0}}};
  std::printf("Kiln's %s path against ggml's vec_dot, %lld outputs of %lld values each:\n",
              cpu::quant_dot_name(cpu::quant_dot_in_use()), (long long)N, (long long)K);
  for (const Type& t : types) {
    const GgufTypeInfo& info = gguf_type_info(uint32_t(t.kiln));
    Tensor blocks = Tensor::empty({N, K / info.block_elements * info.block_bytes}, DType::u8);
    uint8_t* bytes = blocks.data<uint8_t>();
    for (int64_t i = 0; i < blocks.numel(); ++i) bytes[i] = uint8_t(gen());
    for (int64_t b = 0; b < N * K / info.block_elements; ++b)
      for (int at : t.halves) {
        const uint16_t h = float_to_f16(0.005f * normal(gen));
        std::memcpy(bytes + b * info.block_bytes + at, &h, 2);
      }
    std::vector<float> x(K), kiln_out(N), ggml_out(N);
    for (float& v : x) v = normal(gen);
    const QuantizedMatrix q = gguf_to_quantized(t.kiln, blocks, N, K, DType::f32);
    cpu::quantized_matmul_rows(x.data(), 1, q, kiln_out.data(), cpu::quant_dot_in_use());
    const ggml_type_traits_cpu* traits = ggml_get_type_traits_cpu(t.ggml);
    std::vector<uint8_t> activations(ggml_row_size(traits->vec_dot_type, K));
    ggml_get_type_traits_cpu(traits->vec_dot_type)->from_float(x.data(), activations.data(), K);
    int same = 0, one_ulp = 0;
    double worst = 0;
    for (int64_t n = 0; n < N; ++n) {
      traits->vec_dot(int(K), &ggml_out[n], 0, bytes + n * ggml_row_size(t.ggml, K), 0, activations.data(), 0, 1);
      const int64_t ulps = std::abs(int64_t(std::bit_cast<int32_t>(kiln_out[n])) - std::bit_cast<int32_t>(ggml_out[n]));
      same += ulps == 0;
      one_ulp += ulps == 1;
      worst = std::max(worst, std::abs(double(kiln_out[n]) - ggml_out[n]) / std::abs(double(ggml_out[n])));
    }
    std::printf("%-6s %2d of %lld the same bits, %2d one ulp apart, largest relative difference %.1e\n", info.name,
                same, (long long)N, one_ulp, worst);
  }
}
