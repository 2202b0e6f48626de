// kiln/io: atomic files and safetensors. Expected bytes come from the
// reference implementation or are laid out by hand, never from our writer.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "io_test_util.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"

using namespace kiln;
using namespace kiln::io_test;

namespace {

// Deterministic bytes from an LCG, independent of the code under test.
std::string pattern_bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = char(x >> 24);
  }
  return s;
}

Tensor tensor_with_bytes(const Shape& shape, DType dt, const std::string& bytes) {
  Tensor t = Tensor::empty(shape, dt);
  EXPECT_EQ(t.nbytes(), bytes.size());
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string raw(const Tensor& t) {
  if (t.numel() == 0) return std::string();
  EXPECT_TRUE(t.is_contiguous());
  return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  EXPECT_TRUE(t.is_contiguous());
  std::vector<T> out(size_t(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.data_ptr(), t.nbytes());
  return out;
}

}  // namespace

// ---------------------------------------------------------------- atomic file

class IoAtomicFile : public ScratchDir {};

TEST_F(IoAtomicFile, WritesThenReplacesWithoutLitter) {
  write_file_atomic(path("a.bin"), "first");
  EXPECT_EQ(read_bytes(path("a.bin")), "first");
  write_file_atomic(path("a.bin"), "second, and longer");
  EXPECT_EQ(read_bytes(path("a.bin")), "second, and longer");
  EXPECT_EQ(listing(), std::vector<std::string>{"a.bin"});
  auto perms = fs::status(path("a.bin")).permissions();
  EXPECT_NE(perms & fs::perms::others_read, fs::perms::none);  // not mkstemp's 0600
}

TEST_F(IoAtomicFile, WriterDyingMidwayKeepsOldFileAndLeavesNoTemp) {
  write_file_atomic(path("a.bin"), "old contents");
  try {
    AtomicFileWriter w(path("a.bin"));
    w.write("new contents, half writ");
    EXPECT_EQ(fs::path(w.temp_path()).parent_path(), dir_);  // same directory, so rename is atomic
    EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_EQ(read_bytes(path("a.bin")), "old contents");  // nothing visible before commit
    throw std::runtime_error("the writer failed midway");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_bytes(path("a.bin")), "old contents");
  EXPECT_EQ(listing(), std::vector<std::string>{"a.bin"});
}

TEST_F(IoAtomicFile, AbortedFirstWriteLeavesNothing) {
  {
    AtomicFileWriter w(path("new.bin"));
    w.write("partial");
    w.abort();
    expect_error([&] { w.write("more"); }, {path("new.bin"), "already committed or aborted"});
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(IoAtomicFile, FailedRenameNamesPathAndLeavesNoTemp) {
  // rename(2) cannot replace a directory with a file: a failure at the very
  // last step, after all data was written.
  fs::create_directory(path("target"));
  write_bytes(path("target/inside"), "keep me");
  expect_error([&] { write_file_atomic(path("target"), "data"); }, {path("target"), "renaming", "unchanged"});
  EXPECT_EQ(listing(), std::vector<std::string>{"target"});
  EXPECT_EQ(read_bytes(path("target/inside")), "keep me");
}

TEST_F(IoAtomicFile, MissingDirectoryNamesPathAndErrno) {
  expect_error([&] { write_file_atomic(path("no/such/dir/x.bin"), "data"); },
               {path("no/such/dir/x.bin"), "No such file or directory"});
}

// ---------------------------------------------------------------- safetensors round trips

class IoSafetensors : public ScratchDir {};

TEST_F(IoSafetensors, RoundTripsEveryDtypeAndShape) {
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8};
  const Shape shapes[] = {{}, {0}, {5}, {2, 3}, {3, 0, 2}, {1, 4, 1, 3}};
  NamedTensors tensors;
  std::map<std::string, std::string> expected;
  uint32_t seed = 1;
  for (DType dt : dtypes)
    for (const Shape& shape : shapes) {
      std::string name = std::string(dtype_name(dt)) + shape_str(shape);
      std::string bytes = pattern_bytes(size_t(shape_numel(shape)) * dtype_size(dt), seed++);
      tensors.emplace_back(name, tensor_with_bytes(shape, dt, bytes));
      expected[name] = bytes;
    }
  save_safetensors(path("all.safetensors"), tensors);
  SafetensorsFile f = load_safetensors(path("all.safetensors"));
  ASSERT_EQ(f.tensors.size(), tensors.size());
  EXPECT_TRUE(f.metadata.empty());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(f.tensors.count(name)) << name;
    const Tensor& got = f.tensors.at(name);
    EXPECT_EQ(got.dtype(), t.dtype()) << name;
    EXPECT_EQ(got.shape(), t.shape()) << name;
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_EQ(raw(got), expected[name]) << name;
  }
}

TEST_F(IoSafetensors, RoundTripsValues) {
  Tensor h = Tensor::empty({2}, DType::bf16);
  static_cast<uint16_t*>(h.data_ptr())[0] = float_to_bf16(0.15625f);
  static_cast<uint16_t*>(h.data_ptr())[1] = float_to_bf16(-3.0f);
  Tensor s = Tensor::scalar(2.5, DType::f16);
  save_safetensors(path("v.safetensors"), {{"f", Tensor::from_vector<float>({1.5f, -2.25f, 3e38f}, {3})},
                                           {"i", Tensor::from_vector<int64_t>({-1, int64_t(1) << 40}, {2, 1})},
                                           {"h", h},
                                           {"s", s}});
  SafetensorsFile f = load_safetensors(path("v.safetensors"));
  EXPECT_EQ(values<float>(f.tensors.at("f")), (std::vector<float>{1.5f, -2.25f, 3e38f}));
  EXPECT_EQ(values<int64_t>(f.tensors.at("i")), (std::vector<int64_t>{-1, int64_t(1) << 40}));
  auto hb = values<uint16_t>(f.tensors.at("h"));
  EXPECT_EQ(bf16_to_float(hb[0]), 0.15625f);
  EXPECT_EQ(bf16_to_float(hb[1]), -3.0f);
  EXPECT_EQ(f.tensors.at("s").dim(), 0);
  EXPECT_EQ(f16_to_float(values<uint16_t>(f.tensors.at("s"))[0]), 2.5f);
}

TEST_F(IoSafetensors, WritesStridedViewsInLogicalOrder) {
  std::vector<float> fv(12);
  std::iota(fv.begin(), fv.end(), 0.0f);
  Tensor transposed = Tensor::from_vector(fv, {3, 4}).as_strided({4, 3}, {1, 4}, 0);
  std::vector<uint8_t> uv(24);
  std::iota(uv.begin(), uv.end(), uint8_t(0));
  Tensor sliced = Tensor::from_vector(uv, {4, 6}).as_strided({2, 3}, {6, 2}, 7);  // rows 1-2, cols 1,3,5
  Tensor broadcast = Tensor::from_vector<int64_t>({10, 20, 30, 40}, {4}).as_strided({3, 4}, {0, 1}, 0);
  Tensor b3 = Tensor::empty({2, 3, 4}, DType::bf16);
  for (int i = 0; i < 24; ++i) static_cast<uint16_t*>(b3.data_ptr())[i] = float_to_bf16(float(i));
  Tensor permuted = b3.as_strided({4, 2, 3}, {1, 12, 4}, 0);  // dims (2, 0, 1)
  for (const Tensor* t : {&transposed, &sliced, &broadcast, &permuted}) ASSERT_FALSE(t->is_contiguous());

  save_safetensors(path("views.safetensors"),
                   {{"transposed", transposed}, {"sliced", sliced}, {"broadcast", broadcast}, {"permuted", permuted}});
  SafetensorsFile f = load_safetensors(path("views.safetensors"));

  auto t = values<float>(f.tensors.at("transposed"));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(t[size_t(i * 3 + j)], float(j * 4 + i));
  auto s = values<uint8_t>(f.tensors.at("sliced"));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(s[size_t(r * 3 + c)], (r + 1) * 6 + 1 + 2 * c);
  EXPECT_EQ(values<int64_t>(f.tensors.at("broadcast")),
            (std::vector<int64_t>{10, 20, 30, 40, 10, 20, 30, 40, 10, 20, 30, 40}));
  auto p = values<uint16_t>(f.tensors.at("permuted"));
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(bf16_to_float(p[size_t((a * 2 + b) * 3 + c)]), float(b * 12 + c * 4 + a));
  EXPECT_EQ(f.tensors.at("permuted").shape(), (Shape{4, 2, 3}));
}

TEST_F(IoSafetensors, StridedRowLargerThanStagingBuffer) {
  // Each logical row is 300000 int32 = 1.2 MB, more than the 1 MB staging buffer.
  std::vector<int32_t> v(600000);
  std::iota(v.begin(), v.end(), 0);
  Tensor t = Tensor::from_vector(v, {300000, 2}).as_strided({2, 300000}, {1, 2}, 0);
  save_safetensors(path("big.safetensors"), {{"t", t}, {"small", Tensor::from_vector<int32_t>({7}, {1})}});
  SafetensorsFile f = load_safetensors(path("big.safetensors"));
  auto got = values<int32_t>(f.tensors.at("t"));
  ASSERT_EQ(got.size(), 600000u);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 300000; c += 997) ASSERT_EQ(got[size_t(r * 300000 + c)], c * 2 + r);
  EXPECT_EQ(got.back(), 599999);
  EXPECT_EQ(values<int32_t>(f.tensors.at("small")), std::vector<int32_t>{7});
}

TEST_F(IoSafetensors, CopyTensorBytesGathersAView) {
  std::vector<int32_t> v(12);
  std::iota(v.begin(), v.end(), 0);
  Tensor view = Tensor::from_vector(v, {3, 4}).as_strided({2, 2}, {4, 2}, 5);  // [[5, 7], [9, 11]]
  std::vector<int32_t> out(4, -1);
  copy_tensor_bytes(view, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{5, 7, 9, 11}));
}

TEST_F(IoSafetensors, MetadataRoundTrips) {
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "ünïcode \"quoted\""}, {"empty", ""}};
  save_safetensors(path("m.safetensors"), {{"x", Tensor::scalar(1.0)}}, meta);
  EXPECT_EQ(load_safetensors(path("m.safetensors")).metadata, meta);
  EXPECT_EQ(read_bytes(path("m.safetensors")).substr(8, 17), "{\"__metadata__\":{");
  save_safetensors(path("n.safetensors"), {{"x", Tensor::scalar(1.0)}});
  EXPECT_EQ(read_bytes(path("n.safetensors")).find("__metadata__"), std::string::npos);
}

TEST_F(IoSafetensors, EmptyFileRoundTrips) {
  save_safetensors(path("e.safetensors"), {});
  EXPECT_EQ(read_bytes(path("e.safetensors")), u64_le(8) + "{}      ");  // what the reference writes
  EXPECT_TRUE(load_safetensors(path("e.safetensors")).tensors.empty());
}

TEST_F(IoSafetensors, RejectsUnsavableInput) {
  Tensor x = Tensor::scalar(1.0);
  expect_error([&] { save_safetensors(path("d.safetensors"), {{"a", x}, {"a", x}}); },
               {path("d.safetensors"), "'a' appears twice"});
  expect_error([&] { save_safetensors(path("d.safetensors"), {{"__metadata__", x}}); }, {"reserved"});
  expect_error([&] { save_safetensors(path("d.safetensors"), {{"u", Tensor()}}); }, {"'u' is undefined"});
  EXPECT_TRUE(listing().empty());
}

// ---------------------------------------------------------------- the reference layout

// Bytes written by the reference implementation, safetensors 0.8.0:
//   safetensors.numpy.save({"a": np.array([1, 2], np.float32)}, metadata={"format": "pt"})
TEST_F(IoSafetensors, MatchesReferenceBytesForOneTensor) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string reference =
      std::string("\x58\0\0\0\0\0\0\0", 8) + header + "   " + std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  ASSERT_EQ(reference.size(), 104u);

  write_bytes(path("ref.safetensors"), reference);
  SafetensorsFile f = load_safetensors(path("ref.safetensors"));
  EXPECT_EQ(values<float>(f.tensors.at("a")), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));

  save_safetensors(path("ours.safetensors"), {{"a", Tensor::from_vector<float>({1, 2}, {2})}}, {{"format", "pt"}});
  EXPECT_EQ(read_bytes(path("ours.safetensors")), reference);
}

// safetensors.numpy.save({"b": np.array([1, 2, 3], np.uint8), "a": np.array([1., 2.], np.float32),
//   "c": np.array([.5]), "s": np.array(7, np.int64), "z": np.zeros((2, 0), np.float16)})
TEST_F(IoSafetensors, MatchesReferenceBytesAcrossDtypesAndShapes) {
  const std::string header =
      R"({"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("c":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
      R"("z":{"dtype":"F16","shape":[2,0],"data_offsets":[24,24]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[24,27]}})";
  const std::string data = std::string("\x07\0\0\0\0\0\0\0", 8) + std::string("\0\0\0\0\0\0\xe0\x3f", 8) +
                           std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8) + "\x01\x02\x03";
  const std::string reference = u64_le(280) + header + std::string(7, ' ') + data;
  ASSERT_EQ(header.size() + 7, 280u);

  write_bytes(path("ref.safetensors"), reference);
  SafetensorsFile f = load_safetensors(path("ref.safetensors"));
  ASSERT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(f.tensors.at("s").dim(), 0);
  EXPECT_EQ(values<int64_t>(f.tensors.at("s")), std::vector<int64_t>{7});
  EXPECT_EQ(values<double>(f.tensors.at("c")), std::vector<double>{0.5});
  EXPECT_EQ(f.tensors.at("z").shape(), (Shape{2, 0}));
  EXPECT_EQ(f.tensors.at("z").dtype(), DType::f16);
  EXPECT_EQ(values<uint8_t>(f.tensors.at("b")), (std::vector<uint8_t>{1, 2, 3}));

  save_safetensors(path("ours.safetensors"), {{"b", Tensor::from_vector<uint8_t>({1, 2, 3}, {3})},
                                              {"a", Tensor::from_vector<float>({1, 2}, {2})},
                                              {"c", Tensor::from_vector<double>({0.5}, {1})},
                                              {"s", Tensor::scalar(7, DType::i64)},
                                              {"z", Tensor::empty({2, 0}, DType::f16)}});
  EXPECT_EQ(read_bytes(path("ours.safetensors")), reference);
}

// The reference's tensor order for all Kiln dtypes (safetensors.serialize of
// one-element tensors): I64, F64, F32, I32, BF16, F16, U8; ties by name.
TEST_F(IoSafetensors, HeaderOrderMatchesReferenceForAllDtypes) {
  NamedTensors t = {{"u", Tensor::empty({1}, DType::u8)},  {"h", Tensor::empty({1}, DType::f16)},
                    {"b", Tensor::empty({1}, DType::bf16)}, {"i", Tensor::empty({1}, DType::i32)},
                    {"f", Tensor::empty({1}, DType::f32)},  {"d", Tensor::empty({1}, DType::f64)},
                    {"l", Tensor::empty({1}, DType::i64)},  {"a", Tensor::empty({1}, DType::i64)}};
  EXPECT_EQ(safetensors_header_json(t, {}),
            R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
            R"("l":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
            R"("d":{"dtype":"F64","shape":[1],"data_offsets":[16,24]},)"
            R"("f":{"dtype":"F32","shape":[1],"data_offsets":[24,28]},)"
            R"("i":{"dtype":"I32","shape":[1],"data_offsets":[28,32]},)"
            R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[32,34]},)"
            R"("h":{"dtype":"F16","shape":[1],"data_offsets":[34,36]},)"
            R"("u":{"dtype":"U8","shape":[1],"data_offsets":[36,37]}})");
}

// ---------------------------------------------------------------- corrupt files

class IoSafetensorsCorrupt : public ScratchDir {
 protected:
  // Writes `bytes` and expects loading to fail naming the file and each needle.
  void expect_rejected(const std::string& bytes, std::initializer_list<std::string> needles) {
    const std::string p = path("bad.safetensors");
    write_bytes(p, bytes);
    expect_error([&] { load_safetensors(p); }, {p});
    expect_error([&] { load_safetensors(p); }, needles);
  }
};

TEST_F(IoSafetensorsCorrupt, ShorterThanLengthPrefix) {
  expect_rejected("", {"holds 0 bytes", "8-byte header length"});
  expect_rejected("abc", {"holds 3 bytes"});
}

TEST_F(IoSafetensorsCorrupt, HeaderLengthLargerThanFile) {
  expect_rejected(u64_le(1000) + "{}", {"header length 1000 is larger than the rest of the file (2 bytes)"});
  expect_rejected(u64_le(~uint64_t(0)) + "{}", {"is larger than the rest of the file"});
}

TEST_F(IoSafetensorsCorrupt, InvalidJson) {
  expect_rejected(make_safetensors(R"({"a": {"dtype": )", ""), {"not valid JSON"});
  expect_rejected(make_safetensors("[1, 2]", ""), {"not an object"});
  expect_rejected(u64_le(8) + std::string(8, '\0'), {"not valid JSON"});
}

TEST_F(IoSafetensorsCorrupt, BadEntries) {
  expect_rejected(make_safetensors(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x"),
                  {"tensor 'w'", "unsupported safetensors dtype 'F8_E4M3'"});
  expect_rejected(make_safetensors(R"({"w":{"dtype":"F32","shape":[1]}})", ""), {"'w'", "lacks \"data_offsets\""});
  expect_rejected(make_safetensors(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
                  {"'w'", "non-negative integer"});
  expect_rejected(make_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", ""),
                  {"'w'", "end before they begin"});
  expect_rejected(make_safetensors(R"({"w":7})", ""), {"'w'", "not an object"});
  expect_rejected(make_safetensors(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "'k'", "not a string"});
}

TEST_F(IoSafetensorsCorrupt, ShapeDisagreesWithOffsets) {
  expect_rejected(make_safetensors(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, 'x')),
                  {"tensor 'w'", "shape [2, 3] need 24 bytes", "span 20"});
  // A shape whose byte count overflows 64 bits must not wrap to a small number.
  expect_rejected(make_safetensors(
                      R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                  {"'w'", "more than 2^64"});
}

TEST_F(IoSafetensorsCorrupt, OverlapsGapsAndTrailingBytes) {
  expect_rejected(make_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                   std::string(12, 'x')),
                  {"'a' [0, 8)", "'b' [4, 12)", "overlap"});
  expect_rejected(make_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                   std::string(12, 'x')),
                  {"bytes [4, 8) of the data buffer belong to no tensor"});
  expect_rejected(make_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
                  {"bytes [0, 4)", "belong to no tensor"});
  expect_rejected(make_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(6, 'x')),
                  {"2 trailing bytes after the last tensor"});
}

TEST_F(IoSafetensorsCorrupt, OffsetsPastTheBuffer) {
  // Header (56 bytes padded) + 8 length = data starts at byte 64.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ((header.size() + 7) / 8 * 8, 56u);
  expect_rejected(make_safetensors(header, std::string(4, 'x')),
                  {"tensor 'a' needs bytes [64, 72) but the file holds only 68"});
}

TEST_F(IoSafetensorsCorrupt, TruncatedFileNamesTheTensor) {
  const std::string p = path("model.safetensors");
  save_safetensors(p, {{"a", Tensor::from_vector<float>({1, 2}, {2})},
                       {"h.3.mlp.c_fc.weight", Tensor::from_vector<float>(std::vector<float>(16, 1.0f), {4, 4})}});
  std::string bytes = read_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const uint64_t data_start = 8 + n;
  ASSERT_EQ(bytes.size(), data_start + 8 + 64);  // a, then the weight (ties sort by name)
  write_bytes(p, bytes.substr(0, bytes.size() - 10));
  expect_error([&] { load_safetensors(p); },
               {p + ": tensor 'h.3.mlp.c_fc.weight' needs bytes [" + std::to_string(data_start + 8) + ", " +
                std::to_string(data_start + 72) + ") but the file holds only " + std::to_string(bytes.size() - 10)});
  // Cut inside the header: the length prefix now exceeds the file.
  write_bytes(p, bytes.substr(0, 8 + n / 2));
  expect_error([&] { load_safetensors(p); }, {p, "header length " + std::to_string(n)});
}

TEST_F(IoSafetensorsCorrupt, MissingFileOrDirectory) {
  expect_error([&] { load_safetensors(path("absent.safetensors")); },
               {path("absent.safetensors"), "No such file or directory"});
  fs::create_directory(path("dir.safetensors"));
  expect_error([&] { load_safetensors(path("dir.safetensors")); }, {path("dir.safetensors"), "not a regular file"});
}

TEST_F(IoSafetensorsCorrupt, EveryTruncationIsRejected) {
  const std::string p = path("t.safetensors");
  save_safetensors(p, {{"w", Tensor::from_vector<float>({1, 2, 3}, {3})}, {"b", Tensor::scalar(1, DType::u8)}},
                   {{"format", "pt"}});
  const std::string good = read_bytes(p);
  for (size_t n = 0; n < good.size(); ++n) {
    write_bytes(p, good.substr(0, n));
    EXPECT_THROW(load_safetensors(p), kiln::Error) << "kept " << n << " of " << good.size() << " bytes";
  }
}
