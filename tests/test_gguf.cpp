// The GGUF reader (kiln/io/gguf.h) on a file llama.cpp's own writer made
// (tests/hf/make_gguf_fixture.py): every metadata type, tensors as views of
// the mapping in Kiln's row-major shapes, and every damaged variant of it an
// error that names the problem (tests/fuzz/gguf_fuzzer.cpp fuzzes the parser).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"
#include "kiln/io/gguf.h"
#include "kiln/io/gguf_quants.h"
#include "kiln/io/gguf_writer.h"
#include "kiln/nn/layers.h"
#include "kiln/text/gguf_vocab.h"
#include "kiln/text/hf_tokenizer.h"
#include "models/hf/gguf_architectures.h"
#include "models/hf/gguf_model.h"
#include "models/hf/hf_model.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/small.gguf";

// The bytes of a file's matrices (two or more dimensions) of `type`.
size_t matrix_bytes(const GgufFile& file, GgufType type) {
  size_t n = 0;
  for (const GgufTensorInfo& t : file.header().tensors)
    if (t.type == type && t.dims.size() >= 2) n += t.bytes;
  return n;
}

void expect_near_each(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
  EXPECT_LT(worst, tolerance);
}

std::vector<uint8_t> fixture_bytes() {
  std::ifstream in(kFixture, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Opening a file again (a model load opens it for its config, weights,
// tokenizer and template) reuses its parsed header; a file that changed on
// disk is parsed again.
TEST(Gguf, ReopeningAnUnchangedFileReusesItsParsedHeader) {
  const fs::path copy = fs::temp_directory_path() / ("kiln_gguf_reopen_" + std::to_string(::getpid()) + ".gguf");
  fs::copy_file(kFixture, copy, fs::copy_options::overwrite_existing);
  const GgufFile first = GgufFile::open(copy.string());
  const GgufFile again = GgufFile::open(copy.string());
  EXPECT_EQ(&first.header(), &again.header());
  EXPECT_EQ(again.metadata()["general.architecture"], "llama");
  {
    std::vector<uint8_t> bytes = fixture_bytes();
    bytes.insert(bytes.end(), 64, uint8_t(0));  // a longer file: parsed anew (the data section may end anywhere)
    std::ofstream out(copy, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  const GgufFile changed = GgufFile::open(copy.string());
  EXPECT_NE(&changed.header(), &first.header());
  EXPECT_EQ(changed.metadata()["general.architecture"], "llama");
  fs::remove(copy);
}

TEST(Gguf, ReadsEveryMetadataTypeAndTensorAsLlamaCppWroteThem) {
  const GgufFile f = GgufFile::open(kFixture);
  const auto& m = f.metadata();
  EXPECT_EQ(f.header().version, 3u);
  EXPECT_EQ(m["general.architecture"], "llama");
  EXPECT_EQ(m["test.u8"], 200);
  EXPECT_EQ(m["test.i8"], -100);
  EXPECT_EQ(m["test.u16"], 60000);
  EXPECT_EQ(m["test.i16"], -30000);
  EXPECT_EQ(m["test.u32"], 4000000000u);
  EXPECT_EQ(m["test.i32"], -2000000000);
  EXPECT_EQ(m["test.f32"].get<double>(), 0.25);
  EXPECT_EQ(m["test.u64"], (uint64_t(1) << 40) + 1);
  EXPECT_EQ(m["test.i64"], -(int64_t(1) << 40));
  EXPECT_EQ(m["test.f64"].get<double>(), 1e-300);
  EXPECT_EQ(m["test.bool"], true);
  EXPECT_EQ(m["test.string"], "caf\u00e9 \u4f60\u597d");
  EXPECT_EQ(m["test.strings"], nlohmann::json({"a", "", "<0x0A>"}));
  EXPECT_EQ(m["test.ints"], nlohmann::json({1, -2, 3}));
  EXPECT_EQ(m["test.nested"], nlohmann::json({{1, 2}, {3}}));
  EXPECT_EQ(m["llama.context_length"], 128);

  const Tensor f32 = f.tensor("f32");
  EXPECT_EQ(f32.shape(), (Shape{2, 3}));
  EXPECT_EQ(f32.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(to_dtype(f.tensor("f16"), DType::f32).to_vector<float>(), (std::vector<float>{0.5f, -1.5f}));
  EXPECT_EQ(to_dtype(f.tensor("bf16"), DType::f32).to_vector<float>(), (std::vector<float>{1, -2, 3.5f, 0}));
  // Q8_0: two rows of one block each (a f16 scale, then 32 int8 values): 34 bytes a row.
  const Tensor q = f.tensor("q8_0");
  EXPECT_EQ(q.dtype(), DType::u8);
  EXPECT_EQ(q.shape(), (Shape{2, 34}));
  const GgufTensorInfo* info = f.find("q8_0");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->type, GgufType::Q8_0);
  EXPECT_EQ(info->dims, (std::vector<int64_t>{32, 2}));
  EXPECT_THROW(f.tensor("missing"), Error);
}

// Every truncation of the file, and every single damaged byte of its header,
// is a kiln::Error or a file that still parses: never a crash or a huge allocation.
TEST(Gguf, DamagedFilesAreClearErrors) {
  const std::vector<uint8_t> whole = fixture_bytes();
  const GgufHeader good = parse_gguf(whole.data(), whole.size());
  for (size_t n = 0; n < whole.size(); ++n) {
    try {
      parse_gguf(whole.data(), n);
      EXPECT_GE(n, good.data_start) << "a file cut at " << n << " bytes parsed";
    } catch (const Error&) {
    }
  }
  for (size_t at = 0; at < good.data_start; ++at)
    for (uint8_t v : {uint8_t(0), uint8_t(0xFF), uint8_t(whole[at] ^ 0x40)}) {
      std::vector<uint8_t> bad = whole;
      bad[at] = v;
      try {
        parse_gguf(bad.data(), bad.size());
      } catch (const Error&) {
      }
    }
  auto error_of = [&](size_t at, std::vector<uint8_t> bytes) -> std::string {
    std::vector<uint8_t> bad = whole;
    std::copy(bytes.begin(), bytes.end(), bad.begin() + long(at));
    try {
      parse_gguf(bad.data(), bad.size());
    } catch (const Error& e) {
      return e.what();
    }
    return "parsed";
  };
  auto expect_says = [](const std::string& error, const std::string& says) {
    EXPECT_NE(error.find(says), std::string::npos) << error;
  };
  expect_says(error_of(0, {'G', 'G', 'M', 'L'}), "not a GGUF file");
  expect_says(error_of(4, {1, 0, 0, 0}), "version 1");
  expect_says(error_of(8, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}), "tensors claimed");
  expect_says(error_of(16, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}), "key-values claimed");
  expect_says(error_of(24, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}), "the file ends inside a key");
  const fs::path empty = fs::temp_directory_path() / "kiln_empty.gguf";
  std::ofstream(empty).close();
  EXPECT_THROW(GgufFile::open(empty.string()), Error);
  EXPECT_THROW(GgufFile::open((fs::temp_directory_path() / "kiln_no_such.gguf").string()), Error);
  fs::remove(empty);
}

TEST(Gguf, TypesKilnDoesNotReadAreNamed) {
  EXPECT_STREQ(gguf_type_info(12).name, "Q4_K");
  EXPECT_EQ(gguf_type_info(14).block_bytes, 210);
  EXPECT_STREQ(gguf_type_info(20).name, "IQ4_NL");
  EXPECT_EQ(gguf_type_info(23).block_bytes, 136);  // IQ4_XS
  for (const auto& [type, name] : {std::pair{16, "IQ2_XXS"}, {39, "MXFP4"}}) {
    try {
      gguf_type_info(type);
      ADD_FAILURE() << name;
    } catch (const Error& e) {
      const std::string want = "tensor type " + std::to_string(type) + " (" + name + ")";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  try {
    gguf_type_info(99);  // no type of ggml's
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor type 99 is not"), std::string::npos) << e.what();
  }
}


// A Llama converted by llama.cpp's convert_hf_to_gguf.py (tests/hf/fixtures/gguf-tiny:
// `make_fixtures.py --speed DIR --shape gguf-tiny`, then the converter with --outtype f32 and f16) is the
// folder's model: its config, and (F32) the same log-probabilities bit for bit once q and k are un-permuted.
TEST(GgufModels, ALlamaFileIsTheModelOfItsFolder) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-tiny";
  auto folder = models::load_hf_causal_lm(dir, DType::f32);
  const nlohmann::json config = models::read_hf_config(dir);
  const GgufFile f32 = GgufFile::open(dir + "/model-f32.gguf");
  const nlohmann::json from_gguf = models::hf_config_from_gguf(f32);
  for (const char* key : {"hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "vocab_size", "tie_word_embeddings"})
    EXPECT_EQ(from_gguf[key], config[key]) << key;
  EXPECT_NEAR(from_gguf["rope_theta"].get<double>(), config["rope_parameters"]["rope_theta"].get<double>(), 1e-9);
  EXPECT_NEAR(from_gguf["rms_norm_eps"].get<double>(), config["rms_norm_eps"].get<double>(), 1e-12);
  const std::vector<int32_t> ids = {1, 17, 250, 3, 999, 42, 42, 7, 600, 2, 31};
  const auto want = models::next_token_log_probabilities(*folder.model, ids);
  EXPECT_EQ(models::next_token_log_probabilities(*models::load_gguf_language_model(f32), ids), want);
  // F16: the weights rounded to half precision, so near; the matrices kept at 2 bytes unless a dtype is asked
  // for (then widened exactly): the same model either way.
  const GgufFile f16 = GgufFile::open(dir + "/model-f16.gguf");
  const auto kept = models::load_gguf_language_model(f16);
  size_t half_bytes = 0;
  kept->for_each_module([&](const std::string&, nn::Module& m) {
    if (auto* w = dynamic_cast<nn::WeightModule*>(&m); w && w->quantized) {
      EXPECT_EQ(w->quantized->format, QuantFormat::f16);
      half_bytes += w->quantized->bytes();
    }
  });
  EXPECT_EQ(half_bytes, matrix_bytes(f16, GgufType::F16));
  const auto half = models::next_token_log_probabilities(*kept, ids);
  expect_near_each(half, models::next_token_log_probabilities(*models::load_gguf_language_model(f16, DType::f32), ids),
                   1e-5);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(half[i] - want[i])));
  EXPECT_LT(worst, 0.01);
  // The test fixture's GGUF (no layers) is not a model Kiln can build.
  EXPECT_THROW(models::hf_config_from_gguf(GgufFile::open(kFixture)), Error);
}

// A Qwen3 converted by llama.cpp's converter (tests/hf/convert_fixture_to_gguf.py): its own name table (q and k
// norms, q and k not permuted) and head_dim from attention.key_length; the F32 file is its folder's model bit for bit.
TEST(GgufModels, AQwen3FileIsTheModelOfItsFolder) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/qwen3";
  auto folder = models::load_hf_causal_lm(dir, DType::f32);
  const GgufFile file = GgufFile::open(dir + "/model-f32.gguf");
  const nlohmann::json config = models::hf_config_from_gguf(file);
  EXPECT_EQ(config["model_type"], "qwen3");
  for (const char* key : {"hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "vocab_size"})
    EXPECT_EQ(config[key], folder.config[key]) << key;
  const std::vector<int32_t> ids = {0, 41, 471, 80, 422, 327, 13, 499, 301, 260, 258, 405};
  EXPECT_EQ(models::next_token_log_probabilities(*models::load_gguf_language_model(file), ids),
            models::next_token_log_probabilities(*folder.model, ids));
  EXPECT_EQ(models::gguf_folder_files(file.path()).config["architectures"][0], "Qwen3ForCausalLM");
}

// Kiln's writer (kiln/io/gguf_writer.h) and reader agree: every metadata type it writes, tensors at aligned
// offsets, and Q8_0 blocks that dequantize to within half a step of the values.
TEST(Gguf, WrittenFilesReadBack) {
  const fs::path path = fs::temp_directory_path() / ("kiln_gguf_written_" + std::to_string(::getpid()) + ".gguf");
  const nlohmann::json metadata = {{"general.architecture", "llama"}, {"a.count", 7},        {"a.negative", -3},
                                   {"a.float", 0.5},                  {"a.flag", true},      {"a.names", {"x", "y"}},
                                   {"a.types", {1, 3, 5}},            {"a.scores", {0.0, -1.5}}};
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(float(i)) * 3;
  std::vector<uint8_t> f32(values.size() * 4);
  std::memcpy(f32.data(), values.data(), f32.size());
  write_gguf(path.string(), metadata,
             {{"w", {32, 2}, GgufType::F32, f32}, {"q", {32, 2}, GgufType::Q8_0, quantize_q8_0(values.data(), 64)}});
  const GgufFile file = GgufFile::open(path.string());
  for (const auto& [key, value] : metadata.items()) EXPECT_EQ(file.metadata()[key], value) << key;
  EXPECT_EQ(file.tensor("w").to_vector<float>(), values);
  std::vector<float> back(64);
  gguf_dequantize(GgufType::Q8_0, file.tensor("q").data<uint8_t>(), 64, back.data());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(back[i], values[i], 3.0 / 127 / 2 + 1e-3) << i;
  EXPECT_THROW(write_gguf(path.string(), {}, {{"bad", {32}, GgufType::Q8_0, {1, 2, 3}}}), Error);
  fs::remove(path);
}

// One file per architecture, each a transformers model converted by llama.cpp's converter to F16
// (tests/hf/make_gguf_arch_fixtures.py), with transformers' log-probabilities on the same (rounded) weights:
// Kiln on the file gives them within 1e-4. Llama 3.1's RoPE factors (rope_freqs.weight), Qwen2's biases,
// Gemma's norms stored as 1 + w, Gemma 2's soft caps, Gemma 3's sliding pattern and per-type RoPE, Phi-3's
// fused projections and LongRoPE factors, SmolLM3's unrotated layers, Granite's multipliers, OLMo 2's norms,
// and the experts of Mixtral, Qwen3-MoE and OLMoE, split out of their 3-D tensors.
TEST(GgufModels, EachArchitectureIsTheModelTransformersRuns) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-archs/";
  std::ifstream in(dir + "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_EQ(expected.size(), 12u);
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    const GgufFile file = GgufFile::open(dir + name + ".gguf");
    const auto model = models::load_gguf_language_model(file, DType::f32);
    const std::vector<int32_t> ids = want["ids"].get<std::vector<int32_t>>();
    const std::vector<float> lp = models::next_token_log_probabilities(*model, ids);
    const int64_t vocab = model->vocab_size();
    double worst = 0;
    for (size_t t = 0; t + 1 < ids.size(); ++t)
      worst = std::max(worst, std::abs(double(lp[t * size_t(vocab) + size_t(ids[t + 1])]) -
                                       want["logprobs"][t].get<double>()));
    EXPECT_LT(worst, 1e-4);
    // The matrices kept at 2 bytes (the default), multiplied in f32: the same model, its sums in another order
    // where a prompt's products widen as they pack (packed_gemm.h, CPUs without AVX-512): 1.2e-5 apart there.
    expect_near_each(models::next_token_log_probabilities(*models::load_gguf_language_model(file), ids), lp, 5e-5);
    // Run as the file's F16 too (norms and routers narrowed, the products in half precision): near on average
    // (a mixture's router may pick another expert for a token or two).
    const auto half = models::load_gguf_language_model(file, DType::f16);
    const std::vector<float> lp16 = models::next_token_log_probabilities(*half, ids);
    double total = 0;
    for (size_t t = 0; t + 1 < ids.size(); ++t)
      total += std::abs(double(lp16[t * size_t(vocab) + size_t(ids[t + 1])]) - want["logprobs"][t].get<double>());
    EXPECT_LT(total / double(ids.size() - 1), 0.05);
    EXPECT_EQ(models::gguf_folder_files(file.path()).config["model_type"], models::hf_config_from_gguf(file)["model_type"]);
  }
}

// The GGUF fuzzer's architecture seeds (tests/fuzz/make_gguf_seeds.py: the
// fixtures' keys and the tensors a config reads, the vocabulary cut to 8)
// read as the configs of the files they came from, through the parsed bytes
// the fuzzer hands over as they are through a file.
TEST(GgufModels, TheFuzzerSeedsReadAsTheirArchitecturesConfigs) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-archs/";
  std::ifstream in(dir + "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    const std::string seed = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/arch-" + name + ".gguf";
    nlohmann::json from_seed = models::hf_config_from_gguf(GgufFile::open(seed));
    EXPECT_EQ(from_seed["vocab_size"], 8);
    from_seed.erase("vocab_size");
    nlohmann::json from_fixture = models::hf_config_from_gguf(GgufFile::open(dir + name + ".gguf"));
    from_fixture.erase("vocab_size");
    EXPECT_EQ(from_seed, from_fixture);
    std::ifstream bytes_in(seed, std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(bytes_in), std::istreambuf_iterator<char>()};
    const GgufHeader header = parse_gguf(bytes.data(), bytes.size());
    nlohmann::json from_bytes = models::hf_config_from_gguf(models::GgufContents::of_bytes(header, bytes.data()));
    from_bytes.erase("vocab_size");
    EXPECT_EQ(from_bytes, from_seed);
  }
}

// A BERT encoder's file (tests/fuzz/make_gguf_seeds.py's seed of the MiniLM
// fixture through llama.cpp's converter) reads as the config transformers
// wrote for the folder: an embedder's, from the file or from its bytes.
TEST(GgufModels, ABertFileReadsAsItsFoldersEncoderConfig) {
  const std::string seed = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/arch-bert.gguf";
  const nlohmann::json c = models::hf_config_from_gguf(GgufFile::open(seed));
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/embed-minilm/config.json");
  const nlohmann::json folder = nlohmann::json::parse(in);
  for (const char* key : {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                          "max_position_embeddings", "type_vocab_size", "hidden_act", "architectures"})
    EXPECT_EQ(c[key], folder[key]) << key;
  EXPECT_NEAR(c["layer_norm_eps"].get<double>(), folder["layer_norm_eps"].get<double>(), 1e-18);
  EXPECT_EQ(c["vocab_size"], 8);  // the seed's cut embedding (and no tokenizer: no pad_token_id)
  EXPECT_EQ(models::hf_model_kind(c), "embedder");
  std::ifstream bytes_in(seed, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(bytes_in), std::istreambuf_iterator<char>()};
  const GgufHeader header = parse_gguf(bytes.data(), bytes.size());
  EXPECT_EQ(models::hf_config_from_gguf(models::GgufContents::of_bytes(header, bytes.data())), c);
}

// A reranker as llama.cpp's converter writes bge-reranker-v2-m3 (the seed of cli.hf_embed's conversion of the
// rerank-xlmr fixture): RoBERTa's head as "cls" and "cls.output" reads as a classifier with the file's one label. A
// file without "cls" (a BERT cross-encoder's, whose pooler the converter drops) is refused, not scored without it.
TEST(GgufModels, ARerankerFileReadsAsAClassifierWithItsHead) {
  const std::string seed = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/arch-bert-rerank.gguf";
  std::ifstream bytes_in(seed, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(bytes_in), std::istreambuf_iterator<char>()};
  GgufHeader header = parse_gguf(bytes.data(), bytes.size());
  const nlohmann::json c = models::hf_config_from_gguf(models::GgufContents::of_bytes(header, bytes.data()));
  EXPECT_EQ(c["architectures"], nlohmann::json({"BertForSequenceClassification"}));
  EXPECT_EQ(c["id2label"], nlohmann::json({{"0", "LABEL_0"}}));
  EXPECT_EQ(c["type_vocab_size"], 1);
  EXPECT_EQ(models::hf_model_kind(c), "classifier");
  std::erase_if(header.tensors, [](const GgufTensorInfo& t) { return t.name == "cls.weight"; });
  try {
    models::hf_config_from_gguf(models::GgufContents::of_bytes(header, bytes.data()));
    ADD_FAILURE() << "a reranker without its pooler was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drops BERT's pooler"), std::string::npos) << e.what();
  }
}

// Qwen3-Reranker as llama.cpp's converter writes it (the seed of cli.hf_embed's conversion of the rerank-qwen3
// fixture): rank pooling with cls.output reads as Qwen3ForSequenceClassification, its labels "yes" and "no".
TEST(GgufModels, ACausalRerankerFileReadsAsASequenceClassifier) {
  const nlohmann::json c = models::hf_config_from_gguf(
      GgufFile::open(std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/arch-qwen3-rerank.gguf"));
  EXPECT_EQ(c["model_type"], "qwen3");
  EXPECT_EQ(c["architectures"], nlohmann::json({"Qwen3ForSequenceClassification"}));
  EXPECT_EQ(c["id2label"], nlohmann::json({{"0", "yes"}, {"1", "no"}}));
  EXPECT_EQ(models::hf_model_kind(c), "classifier");
}

// nomic-embed-text as llama.cpp's converter writes it (nomic-bert: fused attn_qkv, ffn_gate, rope.freq_base):
// the hub checkpoint's config, whose sizes are the transformers-made folder's.
TEST(GgufModels, ANomicBertFileReadsAsItsFoldersEncoderConfig) {
  const std::string seed = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/arch-nomic-bert.gguf";
  const nlohmann::json c = models::hf_config_from_gguf(GgufFile::open(seed));
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/embed-nomic-bert/config.json");
  const nlohmann::json folder = nlohmann::json::parse(in);
  for (const auto& [hub, transformers] : {std::pair{"n_embd", "hidden_size"},
                                          {"n_layer", "num_hidden_layers"},
                                          {"n_head", "num_attention_heads"},
                                          {"n_inner", "intermediate_size"},
                                          {"type_vocab_size", "type_vocab_size"},
                                          {"model_type", "model_type"}})
    EXPECT_EQ(c[hub], folder[transformers]) << hub;
  EXPECT_EQ(c["rotary_emb_base"], folder["rope_parameters"]["rope_theta"]);
  EXPECT_EQ(c["activation_function"], "swiglu");
  EXPECT_EQ(c["qkv_proj_bias"], false);
  EXPECT_EQ(models::hf_model_kind(c), "embedder");
}

// A file's RoPE scaling as transformers' config names it: Llama 3.1's ramp recovered from rope_freqs.weight.
TEST(GgufModels, Llama3RopeFactorsAreReadAsTheirConfig) {
  const GgufFile file = GgufFile::open(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-archs/llama3-rope.gguf");
  const nlohmann::json rope = models::hf_config_from_gguf(file)["rope_parameters"];
  EXPECT_EQ(rope["rope_type"], "llama3");
  EXPECT_DOUBLE_EQ(rope["factor"].get<double>(), 8.0);  // make_fixtures.py's llama-gqa: 8, 1, 4, 16
  EXPECT_DOUBLE_EQ(rope["low_freq_factor"].get<double>(), 1.0);
  EXPECT_NEAR(rope["high_freq_factor"].get<double>(), 4.0, 1e-6);
  EXPECT_EQ(rope["original_max_position_embeddings"], 16);
}

// Llama 3.1's and 3.2's RoPE as their GGUF files hold it (rope_freqs.weight, the converter's divisors for
// theta 500000, head_dim 128, factor 8 or 32 ramped over wavelengths of 8192 / 4 to 8192): read back as the
// config.json rope_scaling that made them; divisors no such ramp gives are an error, not ignored.
TEST(GgufModels, RealLlama3RopeFactorsAreReadAsTheirConfig) {
  const fs::path path = fs::temp_directory_path() / ("kiln_gguf_rope_" + std::to_string(::getpid()) + ".gguf");
  auto config_with = [&](const std::vector<double>& divisors) {
    std::vector<float> f(divisors.begin(), divisors.end());
    std::vector<uint8_t> bytes(f.size() * 4), embedding(256 * 4 * 4, 0);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    const nlohmann::json m = {{"general.architecture", "llama"}, {"llama.embedding_length", 256},
                              {"llama.block_count", 1},          {"llama.feed_forward_length", 512},
                              {"llama.attention.head_count", 2}, {"llama.context_length", 131072},
                              {"llama.rope.freq_base", 500000.0}};
    write_gguf(path.string(), m,
               {{"rope_freqs.weight", {int64_t(f.size())}, GgufType::F32, bytes},
                {"token_embd.weight", {256, 4}, GgufType::F32, embedding}});
    return models::hf_config_from_gguf(GgufFile::open(path.string()));
  };
  for (double factor : {8.0, 32.0}) {
    const auto rope = config_with(models::llama3_rope_divisors(500000, 128, factor, 1, 4, 8192))["rope_parameters"];
    EXPECT_EQ(rope["rope_type"], "llama3");
    EXPECT_DOUBLE_EQ(rope["factor"].get<double>(), factor);
    EXPECT_NEAR(rope["high_freq_factor"].get<double>(), 4.0, 1e-6);
    EXPECT_EQ(rope["original_max_position_embeddings"], 8192);
  }
  std::vector<double> odd(64, 1.0);
  odd[10] = 3, odd[40] = 2;  // not a ramp
  EXPECT_THROW(config_with(odd), Error);
  fs::remove(path);
}

// An architecture's metadata that is missing, of the wrong type or inconsistent is an error naming the key.
TEST(GgufModels, BadArchitectureMetadataIsAClearError) {
  const fs::path path = fs::temp_directory_path() / ("kiln_gguf_meta_" + std::to_string(::getpid()) + ".gguf");
  const nlohmann::json base = {{"llama.embedding_length", 64},   {"llama.block_count", 2},
                               {"llama.feed_forward_length", 96}, {"llama.attention.head_count", 4},
                               {"llama.context_length", 128}};
  auto error_of = [&](const std::string& arch, nlohmann::json changes) {
    nlohmann::json m = {{"general.architecture", arch}};
    for (const auto& [k, v] : base.items()) m[arch + k.substr(5)] = v;
    for (const auto& [k, v] : changes.items()) m[k] = v;
    write_gguf(path.string(), m, {{"token_embd.weight", {64, 4}, GgufType::F32, std::vector<uint8_t>(64 * 4 * 4)}});
    try {
      models::hf_config_from_gguf(GgufFile::open(path.string()));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto expect_says = [](const std::string& error, const std::string& says) {
    EXPECT_NE(error.find(says), std::string::npos) << error;
  };
  EXPECT_EQ(error_of("llama", {}), "no error");
  expect_says(error_of("falcon", {}), "architecture 'falcon' is not one Kiln loads");
  expect_says(error_of("llama", {{"llama.block_count", 0}}), "llama.block_count");
  // The fuzzer's find: 7 million layers' lists were made before anything else failed.
  expect_says(error_of("gemma3", {{"gemma3.block_count", 7000000}}), "gemma3.block_count' is 7000000; Kiln reads");
  expect_says(error_of("llama", {{"llama.attention.head_count", "four"}}), "llama.attention.head_count");
  expect_says(error_of("qwen3moe", {{"qwen3moe.expert_count", 4}}), "qwen3moe.expert_used_count");
  expect_says(error_of("gemma3", {{"gemma3.attention.sliding_window", 4}, {"gemma3.attention.sliding_window_pattern",
                                                                           {true, false, true}}}),
              "sliding_window_pattern");
  expect_says(error_of("llama", {{"llama.rope.scaling.type", "su"}}), "rope scaling 'su' is not read");
  expect_says(error_of("phi3", {{"phi3.rope.dimension_count", "x"}}), "phi3.rope.dimension_count");
  fs::remove(path);
}

// Tokenizers from metadata alone (the fuzzer's seeds, tests/hf/make_gguf_fixture.py); real vocabularies are
// checked against their models' own ids in tests/hf/test_vocab_corpus.cpp.
TEST(GgufTokenizers, SentencePieceAndByteLevelVocabulariesFromMetadata) {
  const std::string corpus = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/";
  const GgufFile spm_file = GgufFile::open(corpus + "vocab-spm.gguf");
  const text::GgufVocab spm = text::gguf_vocab(spm_file.metadata());
  const auto tok = text::HfTokenizer::from_json(spm.tokenizer, "vocab-spm.gguf");
  const int32_t the = *tok.token_to_id("\u2581the"), end = *tok.token_to_id("<|im_end|>");
  // BOS first (SentencePiece's default), merges recovered from the scores, the control token matched whole.
  EXPECT_EQ(tok.encode("the"), (std::vector<int32_t>{1, the}));
  EXPECT_EQ(tok.encode("the<|im_end|>", false), (std::vector<int32_t>{the, end}));
  EXPECT_EQ(tok.decode(tok.encode("the the")), "the the");
  EXPECT_EQ(tok.encode("\xc3\xa9", false).size(), 3u);  // no piece: SentencePiece's byte fallback (a space, then 2 bytes)
  EXPECT_EQ(spm.end_of_generation_ids, (std::vector<int32_t>{2, end}));
  const text::GgufChatTemplate chat = text::gguf_chat_template(spm_file.metadata());
  EXPECT_EQ(chat.bos_token, "<s>");
  EXPECT_EQ(chat.eos_token, "</s>");
  EXPECT_NE(chat.source.find("bos_token"), std::string::npos);

  const text::GgufVocab bpe = text::gguf_vocab(GgufFile::open(corpus + "vocab-bpe.gguf").metadata());
  const auto byte_level = text::HfTokenizer::from_json(bpe.tokenizer, "vocab-bpe.gguf");
  EXPECT_EQ(byte_level.encode(" the"), (std::vector<int32_t>{*byte_level.token_to_id("\u0120the")}));  // no BOS id
  EXPECT_EQ(byte_level.decode(byte_level.encode("he the")), "he the");
  EXPECT_EQ(bpe.end_of_generation_ids, (std::vector<int32_t>{int32_t(byte_level.vocab_size() - 1)}));

  // Gemma's files spell a piece of spaces with spaces, and rank merges by the file's order, not the scores.
  nlohmann::json gemma = spm_file.metadata();
  gemma["general.architecture"] = "gemma2";
  gemma["tokenizer.ggml.tokens"].push_back("  ");
  gemma["tokenizer.ggml.scores"].push_back(0.0);
  gemma["tokenizer.ggml.token_type"].push_back(1);
  const auto gemma_tok = text::HfTokenizer::from_json(text::gguf_vocab(gemma).tokenizer, "gemma");
  const int32_t spaces = int32_t(gemma["tokenizer.ggml.tokens"].size() - 1);
  EXPECT_EQ(gemma_tok.token_to_id("\u2581\u2581"), spaces);
  EXPECT_EQ(gemma_tok.decode({1, *gemma_tok.token_to_id("\u2581a"), spaces, *gemma_tok.token_to_id("b")}), "a  b");

  nlohmann::json broken = spm_file.metadata();
  broken["tokenizer.ggml.pre"] = "no-such-type";
  broken["tokenizer.ggml.model"] = "gpt2";
  broken["tokenizer.ggml.merges"] = nlohmann::json::array();
  EXPECT_THROW(text::gguf_vocab(broken), Error);  // an unknown pre-tokenizer type, named
  broken["tokenizer.ggml.model"] = "rwkv";
  EXPECT_THROW(text::gguf_vocab(broken), Error);
  broken = spm_file.metadata();
  broken["tokenizer.ggml.token_type"] = nlohmann::json::array({1, 2});
  EXPECT_THROW(text::gguf_vocab(broken), Error);  // one type per token
  // Values of the wrong kind (the fuzzer's find: a NaN token type, once converted to an integer undefined).
  broken = spm_file.metadata();
  broken["tokenizer.ggml.token_type"][0] = std::nan("");
  EXPECT_THROW(text::gguf_vocab(broken), Error);
  broken = spm_file.metadata();
  broken["tokenizer.ggml.scores"][0] = 1e300;
  EXPECT_THROW(text::gguf_vocab(broken), Error);
}

// A pair of texts (a reranker's query and document) joined as llama-server joins them: bos, the first text, eos,
// the separator where add_sep_token says (llama.cpp's default: WordPiece's only), the second text, eos; every token
// of the first token type, as llama.cpp gives them.
TEST(GgufTokenizers, PairsJoinAsLlamaServerJoinsARerankersTexts) {
  nlohmann::json wordpiece = {{"tokenizer.ggml.model", "bert"},
                              {"tokenizer.ggml.tokens", {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "\u2581a", "\u2581b"}},
                              {"tokenizer.ggml.token_type", {3, 2, 3, 3, 1, 1}},
                              {"tokenizer.ggml.unknown_token_id", 1},
                              {"tokenizer.ggml.cls_token_id", 2},
                              {"tokenizer.ggml.seperator_token_id", 3}};
  auto pair = [](const nlohmann::json& m) {
    return text::HfTokenizer::from_json(text::gguf_vocab(m).tokenizer, "pair").encode_pair("a", "b");
  };
  text::TokenPair joined = pair(wordpiece);
  // No add_sep_token: WordPiece's default, a second [SEP].
  EXPECT_EQ(joined.ids, (std::vector<int32_t>{2, 4, 3, 3, 5, 3}));
  EXPECT_EQ(joined.types, std::vector<int32_t>(6, 0));
  wordpiece["tokenizer.ggml.add_sep_token"] = false;  // as the converter writes BERT's ([CLS] A [SEP] B [SEP])
  EXPECT_EQ(pair(wordpiece).ids, (std::vector<int32_t>{2, 4, 3, 5, 3}));

  // XLM-RoBERTa's Unigram vocabulary as bge-reranker-v2-m3's file has it: <s> A </s></s> B </s>, as transformers
  // joins it.
  nlohmann::json unigram =
      GgufFile::open(std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/vocab-ugm.gguf").metadata();
  const int32_t bos = unigram["tokenizer.ggml.bos_token_id"], eos = unigram["tokenizer.ggml.eos_token_id"];
  unigram["tokenizer.ggml.add_bos_token"] = unigram["tokenizer.ggml.add_eos_token"] = true;
  unigram["tokenizer.ggml.add_sep_token"] = true;
  unigram["tokenizer.ggml.seperator_token_id"] = eos;
  const auto tok = text::HfTokenizer::from_json(text::gguf_vocab(unigram).tokenizer, "ugm");
  const std::vector<int32_t> a = tok.encode("a", false), b = tok.encode("b", false);
  std::vector<int32_t> want = {bos};
  want.insert(want.end(), a.begin(), a.end());
  want.insert(want.end(), {eos, eos});
  want.insert(want.end(), b.begin(), b.end());
  want.push_back(eos);
  EXPECT_EQ(tok.encode_pair("a", "b").ids, want);
  unigram["tokenizer.ggml.add_sep_token"] = false;  // (a file that says so: one </s> between)
  want.erase(want.begin() + long(1 + a.size()));
  EXPECT_EQ(text::HfTokenizer::from_json(text::gguf_vocab(unigram).tokenizer, "ugm").encode_pair("a", "b").ids, want);
}

// Random blocks of every quantized type (tests/hf/make_gguf_quants_fixture.py), dequantized as gguf-py, llama.cpp's
// own package, dequantizes them; each also through its Kiln matrix (every one of these types stays quantized in
// Kiln).
TEST(GgufQuants, EveryTypeDequantizesAsLlamaCppsPackageDoes) {
  const GgufFile f = GgufFile::open(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-quants.gguf");
  int types = 0;
  for (const GgufTensorInfo& t : f.header().tensors) {
    if (t.name.ends_with(".values")) continue;
    SCOPED_TRACE(t.name);
    const std::vector<float> want = f.tensor(t.name + ".values").to_vector<float>();
    std::vector<float> got(want.size());
    const uint8_t* blocks = f.tensor(t.name).data<uint8_t>();
    gguf_dequantize(t.type, blocks, int64_t(got.size()), got.data());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::abs(want[i])) << "value " << i;
    if (gguf_maps_to_kiln_quantized(t.type)) {
      const int64_t rows = t.dims[1], cols = t.dims[0];
      const QuantizedMatrix q = gguf_to_quantized(t.type, f.tensor(t.name), rows, cols, DType::f32);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(q, r, row.data());
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_NEAR(row[size_t(c)], want[size_t(r * cols + c)], 1e-6f * std::abs(want[size_t(r * cols + c)])) << r << "," << c;
      }
    }
    ++types;
  }
  EXPECT_EQ(types, 12);
  std::vector<float> out(32);
  EXPECT_THROW(gguf_dequantize(GgufType::Q4_K, nullptr, 32, out.data()), Error);  // not whole super-blocks
}

// llama-quantize's Q8_0, Q4_0, Q4_K_M and IQ4_NL of the gguf-tiny file (its small matrices fall back from the
// K-quants to Q5_0 and Q8_0) give the F32 file's log-probabilities within their rounding.
TEST(GgufModels, QuantizedFilesAreTheirF32FileWithinRounding) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-tiny";
  const std::vector<int32_t> ids = {1, 17, 250, 3, 999, 42, 42, 7, 600, 2, 31};
  const auto want = models::next_token_log_probabilities(*models::load_gguf_language_model(GgufFile::open(dir + "/model-f32.gguf")), ids);
  for (const auto& [file, bound] : {std::pair{"model-q8_0.gguf", 0.02}, {"model-q4_0.gguf", 0.15},
                                    {"model-q4_k_m.gguf", 0.1}, {"model-iq4_nl.gguf", 0.15}}) {
    SCOPED_TRACE(file);
    auto model = models::load_gguf_language_model(GgufFile::open(dir + "/" + file));
    size_t quantized = 0;
    model->for_each_module([&](const std::string&, nn::Module& m) {
      if (auto* w = dynamic_cast<nn::WeightModule*>(&m); w && w->quantized) ++quantized;
    });
    EXPECT_GT(quantized, 0u);  // Q8_0 and Q4_0 matrices stay quantized
    const auto got = models::next_token_log_probabilities(*model, ids);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    EXPECT_LT(worst, bound);
    std::printf("%s: largest log-probability difference from F32 %.4f\n", file, worst);
  }
}

// A model gguf-split wrote as three files (tests/hf/fixtures/gguf-tiny-split: llama-gguf-split --split-max-tensors 8
// of gguf-tiny's Q4_K_M file) opens from its first file as the one file it was, tensors from all three.
TEST(GgufSplit, ASplitModelOpensFromItsFirstFileAsTheWholeFile) {
  const std::string split =
      std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-tiny-split/model-q4_k_m-00001-of-00003.gguf";
  const GgufFile whole =
      GgufFile::open(std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-tiny/model-q4_k_m.gguf");
  const GgufFile file = GgufFile::open(split);
  ASSERT_EQ(file.header().tensors.size(), whole.header().tensors.size());
  std::set<uint32_t> files;
  for (const GgufTensorInfo& t : file.header().tensors) {
    files.insert(t.file);
    const Tensor a = file.tensor(t.name), b = whole.tensor(t.name);
    ASSERT_EQ(a.shape(), b.shape()) << t.name;
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << t.name;
  }
  EXPECT_EQ(files, (std::set<uint32_t>{0, 1, 2}));
  EXPECT_EQ(file.metadata()["general.architecture"], "llama");
  const std::vector<int32_t> ids = {1, 17, 250, 3, 999, 42};
  EXPECT_EQ(models::next_token_log_probabilities(*models::load_gguf_language_model(file), ids),
            models::next_token_log_probabilities(*models::load_gguf_language_model(whole), ids));
  EXPECT_EQ(models::load_hf_tokenizer(split).encode("Hello world"),
            models::load_hf_tokenizer(whole.path()).encode("Hello world"));
}

// A split model's files in a scratch folder, each case a kiln::Error that names what is wrong.
class GgufSplitErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_gguf_split_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (int k = 1; k <= 3; ++k) fs::copy_file(source(k), part(k), fs::copy_options::overwrite_existing);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string source(int k) {
    return std::string(KILN_SOURCE_DIR) + "/tests/hf/fixtures/gguf-tiny-split/model-q4_k_m-0000" + std::to_string(k) +
           "-of-00003.gguf";
  }
  std::string part(int k) const { return (dir_ / ("m-0000" + std::to_string(k) + "-of-00003.gguf")).string(); }
  static std::string error_of(const std::string& path) {
    try {
      GgufFile::open(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(opened)";
  }
  fs::path dir_;
};

TEST_F(GgufSplitErrors, EachWrongFileIsNamed) {
  EXPECT_EQ(GgufFile::open(part(1)).header().tensors.size(), 21u);
  // Its second file: open the first.
  EXPECT_NE(error_of(part(2)).find("open its first, " + part(1)), std::string::npos) << error_of(part(2));
  // A file another split's: its split.no says so.
  fs::copy_file(part(2), part(3), fs::copy_options::overwrite_existing);
  EXPECT_NE(error_of(part(1)).find("is not file 3 of 3"), std::string::npos) << error_of(part(1));
  // A file missing.
  fs::remove(part(3));
  EXPECT_NE(error_of(part(1)).find("its file 3 cannot be read"), std::string::npos) << error_of(part(1));
  // Renamed: the others cannot be found.
  fs::copy_file(source(3), part(3));
  fs::rename(part(1), dir_ / "model.gguf");
  EXPECT_NE(error_of((dir_ / "model.gguf").string()).find("does not end in -00001-of-00003.gguf"), std::string::npos);
}

// The cached header of a split model is reused while none of its files changes, and parsed again when one does.
TEST_F(GgufSplitErrors, ReopeningReusesTheHeaderUntilAnyFileChanges) {
  const GgufFile first = GgufFile::open(part(1));
  EXPECT_EQ(&GgufFile::open(part(1)).header(), &first.header());
  {
    std::ofstream out(part(3), std::ios::binary | std::ios::app);
    out.write("\0\0\0\0", 4);  // a longer last file
  }
  const GgufFile again = GgufFile::open(part(1));
  EXPECT_NE(&again.header(), &first.header());
  EXPECT_EQ(again.header().tensors.size(), 21u);
}

// Files written by Kiln's own writer, split by hand: a tensor in two files, and a count of tensors the files do
// not hold, are errors.
TEST_F(GgufSplitErrors, ATensorTwiceOrACountNotHeldIsAnError) {
  const std::vector<float> values(32, 0.5f);
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  auto write = [&](int k, int count, int tensors, const std::vector<std::string>& names) {
    nlohmann::json m = {{"split.no", k - 1}, {"split.count", count}, {"split.tensors.count", tensors}};
    if (k == 1) m["general.architecture"] = "llama";
    std::vector<GgufTensorOut> out;
    for (const std::string& name : names) out.push_back({name, {32}, GgufType::F32, bytes});
    write_gguf((dir_ / ("h-0000" + std::to_string(k) + "-of-0000" + std::to_string(count) + ".gguf")).string(), m, out);
  };
  const std::string first = (dir_ / "h-00001-of-00002.gguf").string();
  write(1, 2, 2, {"a"});
  write(2, 2, 2, {"b"});
  EXPECT_EQ(GgufFile::open(first).tensor("b").to_vector<float>(), values);
  write(1, 2, 3, {"a"});
  EXPECT_NE(error_of(first).find("should hold 3 tensors (split.tensors.count), and its 2 files hold 2"),
            std::string::npos)
      << error_of(first);
  write(1, 2, 2, {"a"});
  write(2, 2, 2, {"a"});
  EXPECT_NE(error_of(first).find("holds tensor 'a' a second time"), std::string::npos) << error_of(first);
}

}  // namespace
}  // namespace kiln
