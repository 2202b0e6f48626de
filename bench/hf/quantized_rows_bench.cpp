// One decoding step's quantized product (kiln/cpu/quantized_matmul.cpp at
// M = 1), or ROWS rows' through both the decoding kernel and a prompt's GEMM
// (quantized_gemm.cpp: the speed-up is the GEMM's), per weight format, on one thread, with the matrix
// in cache: the kernel's own cost, apart from memory and the rest of the
// step. Random GGUF blocks (f16 scales, and minimums, small and finite) and
// Kiln's int4z, SmolLM-135M's MLP shape (1,536 x 576; the K-quants and
// IQ4_XS, whose blocks are 256 wide, its down projection's 576 x 1,536). Prints the best
// time of REPEATS.
//   kiln_quant_bench [repeats=40] [rows=1]
// `stream`: the decoding kernel past the caches instead, on the run's threads
// (OMP_NUM_THREADS): one GGUF type's matrices of TinyLlama's MLP shape
// (5,632 x 2,048), 1 GiB of them, each product in turn as a decoding step
// takes them, against the memory read bandwidth probe (read_bandwidth.h)
// measured just before, in ROUNDS rounds: the kernel's share of what memory
// gives, with less of the noise of a whole model's run against a probe later.
//   kiln_quant_bench stream TYPE [rounds=5]     (TYPE: q8_0, q4_0, q4_k, q6_k, ...; q8_0g, q4_0g, iq4_nlg,
//                                                q2_kg .. q6_kg, iq4_xsg: their rows in groups of eight, as a
//                                                loaded model holds them)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/hf/read_bandwidth.h"
#include "kiln/core/half.h"
#include "kiln/cpu/quantized_gemm.h"
#include "kiln/cpu/quantized_matmul.h"
#include "kiln/io/gguf.h"
#include "kiln/io/gguf_quants.h"

using namespace kiln;

namespace {

// Random blocks of `type` (f16 scales and minimums at each block's `halves`, small and finite).
QuantizedMatrix random_gguf(std::mt19937& gen, GgufType type, const std::vector<int>& halves, int64_t rows,
                            int64_t cols) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const GgufTypeInfo& info = gguf_type_info(uint32_t(type));
  const int64_t blocks_count = rows * cols / info.block_elements;
  Tensor blocks = Tensor::empty({rows, cols / info.block_elements * info.block_bytes}, DType::u8);
  uint8_t* data = blocks.data<uint8_t>();
  for (int64_t i = 0; i < blocks.numel(); ++i) data[i] = uint8_t(gen());
  for (int64_t b = 0; b < blocks_count; ++b)
    for (int at : halves) {
      const uint16_t h = float_to_f16(0.005f * normal(gen));
      std::memcpy(data + b * info.block_bytes + at, &h, 2);
    }
  return gguf_to_quantized(type, blocks, rows, cols, DType::f32);
}

// Where each type keeps its f16 scale and minimums.
const std::vector<std::pair<std::string, std::pair<GgufType, std::vector<int>>>> kTypes = {
    {"q8_0", {GgufType::Q8_0, {0}}},   {"q4_0", {GgufType::Q4_0, {0}}},    {"q4_1", {GgufType::Q4_1, {0, 2}}},
    {"q5_0", {GgufType::Q5_0, {0}}},   {"q5_1", {GgufType::Q5_1, {0, 2}}}, {"q2_k", {GgufType::Q2_K, {80, 82}}},
    {"q3_k", {GgufType::Q3_K, {108}}}, {"q4_k", {GgufType::Q4_K, {0, 2}}}, {"q5_k", {GgufType::Q5_K, {0, 2}}},
    {"q6_k", {GgufType::Q6_K, {208}}}, {"iq4_nl", {GgufType::IQ4_NL, {0}}}, {"iq4_xs", {GgufType::IQ4_XS, {0}}}};

int stream(std::string type, int rounds) {
  const bool grouped = type.ends_with('g');  // (no type's own name ends so)
  if (grouped) type.pop_back();
  const auto found = std::find_if(kTypes.begin(), kTypes.end(), [&](const auto& t) { return t.first == type; });
  if (found == kTypes.end()) {
    std::fprintf(stderr, "kiln_quant_bench stream: unknown type %s (q8_0, q4_0, ..., q6_k)\n", type.c_str());
    return 2;
  }
  constexpr int64_t N = 5632, K = 2048;
  std::mt19937 gen(1);
  std::vector<QuantizedMatrix> matrices;
  size_t bytes = 0;
  while (bytes < (size_t(1) << 30)) {
    matrices.push_back(random_gguf(gen, found->second.first, found->second.second, N, K));
    if (grouped) matrices.back() = group_rows(matrices.back());
    bytes += matrices.back().bytes();
  }
  std::vector<float> x(static_cast<size_t>(K)), out(static_cast<size_t>(N));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) * 0.1f;
  std::printf("%s%s, %s path, %zu matrices of %lld x %lld (%.2f GiB), %d threads:\n", type.c_str(),
              grouped ? " (rows in groups)" : "", cpu::quant_dot_name(cpu::quant_dot_in_use()), matrices.size(),
              (long long)N, (long long)K,
              double(bytes) / double(size_t(1) << 30), get_num_threads());
  for (int r = 0; r < rounds; ++r) {
    const double probe = read_bandwidth_gbps();
    double best = 1e9;
    for (int pass = 0; pass < 3; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      for (const auto& w : matrices) cpu::quantized_matmul_rows(x.data(), 1, w, out.data(), cpu::quant_dot_in_use());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::printf("round %d: kernel %.2f GB/s, probe %.2f GB/s, share %.0f%%\n", r + 1, double(bytes) / best / 1e9, probe,
                100 * double(bytes) / best / 1e9 / probe);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "stream")
    return stream(argv[2], argc > 3 ? std::max(1, std::atoi(argv[3])) : 5);
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 40;
  const int64_t M = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1, N = 1536, K = 576;
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto gguf = [&](GgufType type, std::vector<int> halves, int64_t rows, int64_t cols) {
    return random_gguf(gen, type, halves, rows, cols);
  };
  std::vector<float> w(static_cast<size_t>(N * K)), x(static_cast<size_t>(M * N)),  // x: rows of K or N
      out(static_cast<size_t>(M * N));
  for (float& v : w) v = 0.05f * normal(gen);
  for (float& v : x) v = normal(gen);
  const std::pair<const char*, QuantizedMatrix> formats[] = {
      {"q8_0", gguf(GgufType::Q8_0, {0}, N, K)},
      {"q8_0g", group_rows(gguf(GgufType::Q8_0, {0}, N, K))},
      {"q4_0", gguf(GgufType::Q4_0, {0}, N, K)},
      {"q4_0g", group_rows(gguf(GgufType::Q4_0, {0}, N, K))},  // rows in groups of eight, as a model holds them
      {"q4_1", gguf(GgufType::Q4_1, {0, 2}, N, K)},
      {"q5_0", gguf(GgufType::Q5_0, {0}, N, K)},
      {"q5_1", gguf(GgufType::Q5_1, {0, 2}, N, K)},
      {"int4z", quantize_matrix(w.data(), N, K, QuantFormat::int4_zero, DType::f32)},
      {"q2_k", gguf(GgufType::Q2_K, {80, 82}, K, N)},
      {"q2_kg", group_rows(gguf(GgufType::Q2_K, {80, 82}, K, N))},
      {"q3_k", gguf(GgufType::Q3_K, {108}, K, N)},
      {"q3_kg", group_rows(gguf(GgufType::Q3_K, {108}, K, N))},
      {"q4_k", gguf(GgufType::Q4_K, {0, 2}, K, N)},
      {"q4_kg", group_rows(gguf(GgufType::Q4_K, {0, 2}, K, N))},
      {"q5_k", gguf(GgufType::Q5_K, {0, 2}, K, N)},
      {"q5_kg", group_rows(gguf(GgufType::Q5_K, {0, 2}, K, N))},
      {"q6_k", gguf(GgufType::Q6_K, {208}, K, N)},
      {"q6_kg", group_rows(gguf(GgufType::Q6_K, {208}, K, N))},
      {"iq4_nl", gguf(GgufType::IQ4_NL, {0}, N, K)},
      {"iq4_nlg", group_rows(gguf(GgufType::IQ4_NL, {0}, N, K))},
      {"iq4_xs", gguf(GgufType::IQ4_XS, {0}, K, N)},
      {"iq4_xsg", group_rows(gguf(GgufType::IQ4_XS, {0}, K, N))}};
  set_num_threads(1);
  std::printf("%s path, %lld x %lld (the K-quants %lld x %lld), %lld rows, best of %d:\n",
              cpu::quant_dot_name(cpu::quant_dot_in_use()), (long long)N, (long long)K, (long long)K, (long long)N,
              (long long)M, repeats);
  auto best_of = [&](auto&& product) {
    const int calls = int(std::max<int64_t>(1, 200 / M));
    double best = 1e9;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) product();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls);
    }
    return best;
  };
  for (const auto& [name, q] : formats) {
    const double rows = best_of([&] { cpu::quantized_matmul_rows(x.data(), M, q, out.data(), cpu::quant_dot_in_use()); });
    std::printf("%-6s row kernel %8.1f us  %5.1f GB/s  %6.1f GMAC/s  %.2f ns a block of 32 and row\n", name,
                rows * 1e6, double(q.bytes()) / rows / 1e9, double(M * N * K) / rows / 1e9,
                rows * 1e9 / double(M * N * K / 32));
    if (M == 1) continue;
    const double gemm = best_of([&] { cpu::quantized_gemm(x.data(), M, q, out.data(), cpu::quant_dot_in_use()); });
    std::printf("%-6s GEMM       %8.1f us  %5.1f GB/s  %6.1f GMAC/s  %.2f ns a block of 32 and row (%.2fx)\n", name,
                gemm * 1e6, double(q.bytes()) / gemm / 1e9, double(M * N * K) / gemm / 1e9,
                gemm * 1e9 / double(M * N * K / 32), rows / gemm);
  }
}
