// Tests for kiln/data datasets and tokenizer: real Fashion-MNIST and fortunes
// files, error messages for missing and corrupt inputs, tokenizer round trips,
// determinism and its on-disk cache. Loaders and splits: test_data_loader.cpp.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "kiln/data/fashion_mnist.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/tokenizer.h"
#include "kiln/text/hf_tokenizer.h"
#include "data_test_util.h"

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::data;
using namespace kiln_data_test;

namespace {

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  }
  gzclose(f);
}

// An IDX u8 file image: magic, big-endian dims, then `data`.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Writes a small valid Fashion-MNIST-shaped pair (n images) for `prefix`.
void write_fake_part(const TempDir& dir, const std::string& prefix, uint32_t n, std::vector<uint8_t> labels) {
  write_gz(dir / (prefix + "-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, std::vector<uint8_t>(n * 784, 7)));
  write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), idx_bytes({uint32_t(labels.size())}, labels));
}

}  // namespace

// ---- Fashion-MNIST ------------------------------------------------------------

TEST(DataFashionMnist, ReadsRealFiles) {
  const ImageDataset& train = real_train();
  ASSERT_EQ(train.images.shape(), (Shape{60000, 28, 28}));
  ASSERT_EQ(train.labels.shape(), (Shape{60000}));
  EXPECT_EQ(train.images.dtype(), DType::u8);
  EXPECT_EQ(train.labels.dtype(), DType::i64);
  // Reference values read from the files with Python's gzip module.
  const int64_t* l = train.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(l, l + 6), (std::vector<int64_t>{9, 0, 0, 3, 0, 2}));
  EXPECT_STREQ(fashion_mnist_class_names()[size_t(l[0])], "Ankle boot");
  const uint8_t* px = train.images.data<uint8_t>();
  EXPECT_EQ(std::accumulate(px, px + 784, int64_t(0)), 76247);
  auto [lo, hi] = std::minmax_element(px, px + train.images.numel());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t i = 0; i < 60000; ++i) per_class[size_t(l[i])]++;
  for (int64_t c : per_class) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced

  ImageDataset test = load_fashion_mnist(FashionMnistPart::test, kFashionMnistDefaultDir);
  ASSERT_EQ(test.size(), 10000);
  const int64_t* tl = test.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(tl, tl + 5), (std::vector<int64_t>{9, 2, 1, 1, 6}));
  const uint8_t* tp = test.images.data<uint8_t>();
  EXPECT_EQ(std::accumulate(tp, tp + 784, int64_t(0)), 33456);
  EXPECT_STREQ(fashion_mnist_class_names()[0], "T-shirt/top");
  EXPECT_STREQ(fashion_mnist_class_names()[1], "Trouser");
}

TEST(DataFashionMnist, MissingDirectoryNamesPackage) {
  std::string msg = error_of([] { load_fashion_mnist(FashionMnistPart::train, "/nonexistent/kiln-fmnist"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/kiln-fmnist")) << msg;
  EXPECT_TRUE(contains(msg, "sudo apt-get install dataset-fashion-mnist")) << msg;
}

TEST(DataFashionMnist, MissingFileNamesFileAndEnvOverrideIsUsed) {
  TempDir dir;
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({1}, {3}));
  const char* old = std::getenv("KILN_FASHION_MNIST_DIR");
  std::string saved = old ? old : "";
  ::setenv("KILN_FASHION_MNIST_DIR", dir.path.c_str(), 1);
  EXPECT_EQ(fashion_mnist_dir(), dir.path.string());
  EXPECT_EQ(fashion_mnist_dir("/explicit"), "/explicit");  // the argument wins
  std::string msg = error_of([] { load_fashion_mnist(FashionMnistPart::train); });
  if (old) ::setenv("KILN_FASHION_MNIST_DIR", saved.c_str(), 1); else ::unsetenv("KILN_FASHION_MNIST_DIR");
  EXPECT_TRUE(contains(msg, dir / "train-images-idx3-ubyte.gz")) << msg;
  EXPECT_TRUE(contains(msg, "sudo apt-get install dataset-fashion-mnist")) << msg;
}

TEST(DataFashionMnist, SmallValidFilesLoad) {
  TempDir dir;
  write_fake_part(dir, "t10k", 3, {0, 9, 4});
  ImageDataset d = load_fashion_mnist(FashionMnistPart::test, dir.path.string());
  ASSERT_EQ(d.size(), 3);
  const int64_t* l = d.labels.data<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(l, l + 3), (std::vector<int64_t>{0, 9, 4}));
  EXPECT_EQ(d.images.data<uint8_t>()[3 * 784 - 1], 7);
}

TEST(DataFashionMnist, CorruptFilesNameFileAndProblem) {
  TempDir dir;
  const std::string images = dir / "train-images-idx3-ubyte.gz", labels = dir / "train-labels-idx1-ubyte.gz";
  auto load = [&] { load_fashion_mnist(FashionMnistPart::train, dir.path.string()); };
  auto expect_error = [&](const std::string& file, const std::string& what) {
    std::string msg = error_of(load);
    EXPECT_TRUE(contains(msg, file)) << msg;
    EXPECT_TRUE(contains(msg, what)) << msg;
  };
  write_fake_part(dir, "train", 4, {1, 2, 3, 4});

  write_gz(images, {0x12, 0x34, 0x08, 3, 0, 0, 0, 1});  // bad magic
  expect_error(images, "wrong magic");

  write_gz(images, idx_bytes({4, 28, 28}, std::vector<uint8_t>(784 * 2, 1)));  // header says 4, holds 2
  expect_error(images, "short data");

  write_gz(images, idx_bytes({4, 28, 28}, std::vector<uint8_t>(784 * 4 + 10, 1)));
  expect_error(images, "more data than its header");

  write_gz(images, idx_bytes({4, 14, 56}, std::vector<uint8_t>(784 * 4, 1)));
  expect_error(images, "[N, 28, 28]");

  write_gz(images, idx_bytes({4, 28, 28}, std::vector<uint8_t>(784 * 4, 1)));
  write_gz(labels, idx_bytes({3}, {1, 2, 3}));
  expect_error(labels, "holds 3 labels");

  write_gz(labels, idx_bytes({4}, {1, 2, 10, 3}));
  expect_error(labels, "label 10");

  // A gzip stream cut short: keep the first half of a valid compressed file.
  write_gz(labels, idx_bytes({4}, {1, 2, 3, 4}));
  std::vector<uint8_t> pixels(784 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7919 % 251);  // poorly compressible
  write_gz(images, idx_bytes({4, 28, 28}, pixels));
  fs::resize_file(images, fs::file_size(images) / 2);
  expect_error(images, "truncated");

  // Not gzip at all and not IDX either (zlib passes plain files through).
  { std::ofstream(images, std::ios::binary) << "this is not a dataset"; }
  expect_error(images, "wrong magic");

  // Damaged compressed bytes in the middle of the stream.
  write_gz(images, idx_bytes({4, 28, 28}, pixels));
  {
    std::fstream f(images, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    std::string junk(200, '\xAB');
    f.write(junk.data(), std::streamsize(junk.size()));
  }
  std::string msg = error_of(load);
  EXPECT_TRUE(contains(msg, images)) << msg;
}

// ---- fortunes ---------------------------------------------------------------------

TEST(DataFortunes, SplitsFileOnPercentLines) {
  EXPECT_EQ(split_fortune_file("a\n  b\n%\nc\n%\n\n%\nd"), (std::vector<std::string>{"a\n  b", "c", "d"}));
  EXPECT_EQ(split_fortune_file(""), std::vector<std::string>{});
  EXPECT_EQ(split_fortune_file("x %\n%\n"), std::vector<std::string>{"x %"});
}

TEST(DataFortunes, DirectoryRules) {
  TempDir dir;
  { std::ofstream(dir / "b") << "bee one\n%\nbee two\n"; }
  { std::ofstream(dir / "a") << "aye\n%\n"; }
  { std::ofstream(dir / "a.dat") << "\x01\x02 binary index"; }
  fs::create_symlink(dir / "a", dir / "a.u8");
  fs::create_directories(dir / "off");
  { std::ofstream(dir / "off/rude") << "offensive\n%\n"; }
  EXPECT_EQ(load_fortunes(dir.path.string()), (std::vector<std::string>{"aye", "bee one", "bee two"}));

  { std::ofstream(dir / "c") << "caf\xE9\n%\n"; }  // Latin-1, not UTF-8
  std::string msg = error_of([&] { load_fortunes(dir.path.string()); });
  EXPECT_TRUE(contains(msg, dir / "c")) << msg;
  EXPECT_TRUE(contains(msg, "UTF-8")) << msg;
}

TEST(DataFortunes, RealCorpus) {
  std::vector<std::string> f = load_fortunes(kFortunesDefaultDir);
  EXPECT_GT(f.size(), 10000u);
  // The first fortune is the start of the alphabetically first file, "art",
  // read here independently.
  std::ifstream art(std::string(kFortunesDefaultDir) + "/art");
  std::string line, first;
  while (std::getline(art, line) && line != "%") first += (first.empty() ? "" : "\n") + line;
  EXPECT_EQ(f[0], first);
  std::set<std::string> distinct(f.begin(), f.end());
  EXPECT_GT(distinct.size(), f.size() * 9 / 10);  // the .u8 symlinks were not read twice
  for (const std::string& s : f) ASSERT_FALSE(contains("\n" + s + "\n", "\n%\n")) << s;
}

TEST(DataFortunes, MissingDirectoryNamesPackage) {
  std::string msg = error_of([] { load_fortunes("/nonexistent/fortunes-dir"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/fortunes-dir")) << msg;
  EXPECT_TRUE(contains(msg, "sudo apt-get install fortunes")) << msg;
}

// ---- tokenizer --------------------------------------------------------------------

namespace {

// A small slice of the corpus and a small vocabulary keep training well under
// a second; the model is cached in a temp dir shared by the tokenizer tests.
class DataTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    corpus_ = new std::vector<std::string>(load_fortunes(kFortunesDefaultDir));
    cache_ = new TempDir();
    train_docs_ = new std::vector<std::string>(corpus_->begin(), corpus_->begin() + 1500);
  }
  static void TearDownTestSuite() {
    delete corpus_;
    delete cache_;
    delete train_docs_;
  }
  static TokenizerOptions options(int vocab = 512) {
    TokenizerOptions o;
    o.vocab_size = vocab;
    o.cache_dir = cache_->path.string();
    o.corpus_name = "test";
    o.num_threads = 2;
    return o;
  }
  static std::vector<std::string>* corpus_;
  static std::vector<std::string>* train_docs_;
  static TempDir* cache_;
};
std::vector<std::string>* DataTokenizer::corpus_ = nullptr;
std::vector<std::string>* DataTokenizer::train_docs_ = nullptr;
TempDir* DataTokenizer::cache_ = nullptr;

}  // namespace

// `kiln export --format hf` writes the model as a tokenizer.json; run by the
// tokenizer.json pipeline (which tests/test_hf_tokenizers.cpp holds to the
// `tokenizers` library) it gives the end-of-text id and then SentencePiece's
// ids for every fortune, and decodes back to the text.
TEST_F(DataTokenizer, AsTokenizerJsonItEncodesEveryFortuneAsSentencePieceDoes) {
  Tokenizer tok = Tokenizer::train_or_load(*train_docs_, options());
  const auto hf = kiln::text::HfTokenizer::from_json_text(tok.to_tokenizer_json(), "exported tokenizer.json");
  EXPECT_EQ(hf.vocab_size(), tok.vocab_size());
  std::vector<std::string> texts(corpus_->begin(), corpus_->end());
  texts.insert(texts.end(), {"\tindented\n   three spaces  and two\n\n", "emoji \xF0\x9F\x98\x80 and \xE6\xBC\xA2\xE5\xAD\x97", ""});
  size_t differ = 0;
  for (const std::string& s : texts) {
    std::vector<int32_t> want{tok.end_of_text_id()};
    const auto ids = tok.encode(s);
    want.insert(want.end(), ids.begin(), ids.end());
    const auto got = hf.encode(s);
    if (got != want && differ++ < 3) ADD_FAILURE() << "differs on: " << s;
    EXPECT_EQ(hf.decode(got), s);
  }
  EXPECT_EQ(differ, 0u) << "of " << texts.size() << " texts";
}

TEST_F(DataTokenizer, RoundTripAndSpecialIds) {
  Tokenizer tok = Tokenizer::train_or_load(*train_docs_, options());
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.end_of_text_id(), 1);
  EXPECT_EQ(tok.piece(1), kEndOfTextPiece);
  // Fortunes from inside and outside the training slice, plus text the corpus
  // never shows: tabs, runs of spaces, leading newlines, emoji, CJK.
  std::vector<std::string> texts = {(*corpus_)[0], (*corpus_)[17], (*corpus_)[5000], corpus_->back(),
                                    "\tindented\n   three spaces  and two\n\n",
                                    "\n leading newline", "emoji \xF0\x9F\x98\x80 and \xE6\xBC\xA2\xE5\xAD\x97",
                                    "<|endoftext|> spelled out", ""};
  for (const std::string& s : texts) {
    std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tok.vocab_size());
      ASSERT_NE(id, tok.end_of_text_id()) << "text must never encode to the separator: " << s;
      ASSERT_NE(id, 0) << "byte fallback should leave nothing unknown: " << s;
    }
    EXPECT_EQ(tok.decode(ids), s);
  }
  // BPE compresses: English text takes clearly fewer tokens than bytes.
  const std::string& f = (*corpus_)[5000];
  EXPECT_LT(tok.encode(f).size(), f.size() * 7 / 10);
  // The separator decodes to nothing; ids outside the vocabulary are errors.
  std::vector<int32_t> with_eot = tok.encode("ab");
  with_eot.insert(with_eot.begin() + 1, tok.end_of_text_id());
  EXPECT_EQ(tok.decode(with_eot), "ab");
  EXPECT_TRUE(contains(error_of([&] { tok.decode({5, 512}); }), "outside the vocabulary"));
  EXPECT_TRUE(contains(error_of([&] { tok.decode({-1}); }), "outside the vocabulary"));
}

TEST_F(DataTokenizer, CachedModelIsNotRetrained) {
  TokenizerOptions o = options(520);
  Tokenizer first = Tokenizer::train_or_load(*train_docs_, o);
  EXPECT_TRUE(first.trained());
  ASSERT_TRUE(fs::exists(first.model_path()));
  EXPECT_EQ(first.model_path(), Tokenizer::cache_path(*train_docs_, o));
  EXPECT_TRUE(contains(first.model_path(), "test-bpe520-"));
  auto mtime = fs::last_write_time(first.model_path());

  Tokenizer second = Tokenizer::train_or_load(*train_docs_, o);
  EXPECT_FALSE(second.trained());
  EXPECT_EQ(fs::last_write_time(second.model_path()), mtime);
  EXPECT_EQ(second.encode((*corpus_)[42]), first.encode((*corpus_)[42]));

  // A different corpus or vocabulary is a different cache entry.
  std::vector<std::string> other(train_docs_->begin(), train_docs_->end() - 1);
  EXPECT_NE(Tokenizer::cache_path(other, o), first.model_path());
  EXPECT_NE(Tokenizer::cache_path(*train_docs_, options(521)), first.model_path());
}

TEST_F(DataTokenizer, CorruptCacheIsRetrained) {
  TokenizerOptions o = options(540);
  Tokenizer good = Tokenizer::train_or_load(*train_docs_, o);
  const std::string path = good.model_path();
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage, not a model"; }
  std::string msg = error_of([&] { Tokenizer::load(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  Tokenizer again = Tokenizer::train_or_load(*train_docs_, o);
  EXPECT_TRUE(again.trained());
  EXPECT_EQ(again.serialized_model(), good.serialized_model());
  EXPECT_EQ(Tokenizer::load(path).serialized_model(), good.serialized_model());  // the file was rewritten
  EXPECT_TRUE(contains(error_of([&] { Tokenizer::load(path + ".missing"); }), "not found"));
}

TEST_F(DataTokenizer, TrainingIsDeterministicAcrossThreadCounts) {
  TempDir other_cache;
  TokenizerOptions a = options(560), b = options(560);
  b.cache_dir = other_cache.path.string();
  b.num_threads = 1;
  Tokenizer ta = Tokenizer::train_or_load(*train_docs_, a), tb = Tokenizer::train_or_load(*train_docs_, b);
  ASSERT_EQ(ta.vocab_size(), tb.vocab_size());
  for (int i = 0; i < ta.vocab_size(); ++i) ASSERT_EQ(ta.piece(i), tb.piece(i)) << "id " << i;
  EXPECT_EQ(ta.encode((*corpus_)[9000]), tb.encode((*corpus_)[9000]));
}

TEST_F(DataTokenizer, TooSmallVocabularyIsAClearError) {
  std::string msg = error_of([&] { Tokenizer::train_or_load(*train_docs_, options(100)); });
  EXPECT_TRUE(contains(msg, "vocab_size 100")) << msg;
}
