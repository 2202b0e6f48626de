// Reading safetensors files. Every byte of the header is untrusted: each field
// is checked before it is used, and any defect becomes a kiln::Error that
// names the file and says what is wrong, never a crash or a huge allocation.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

#include "kiln/io/file_mapping.h"
#include "kiln/io/safetensors.h"

namespace kiln {
namespace {

// The reference implementation refuses headers over 100 MB; so do we, so a
// corrupt length cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin, end;  // relative to the data buffer
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      int err = errno;
      KILN_FAIL("cannot open safetensors file ", path, ": ", std::generic_category().message(err));
    }
    struct stat st;
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) fail("not a regular file");
    size_ = uint64_t(st.st_size);
  }
  ~Reader() { ::close(fd_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  [[noreturn]] void fail(const std::string& what) const { KILN_FAIL("safetensors ", path_, ": ", what); }

  // Reads exactly `n` bytes at `pos`, or fails naming what was being read.
  void read_at(void* dst, uint64_t n, uint64_t pos, const std::string& what) const {
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(fd_, out, std::min<uint64_t>(n, uint64_t(1) << 30), off_t(pos));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("reading " + what + " failed: " + std::generic_category().message(errno));
      if (got == 0) fail("reading " + what + " hit the end of the file at byte " + std::to_string(pos));
      out += got;
      pos += uint64_t(got);
      n -= uint64_t(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::string range_str(uint64_t a, uint64_t b) { return detail::concat("[", a, ", ", b, ")"); }

Entry parse_entry(const Reader& file, const std::string& name, const nlohmann::json& v) {
  auto bad = [&](const std::string& what) { file.fail("tensor '" + name + "': " + what); };
  if (!v.is_object()) bad("header entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(std::string("header entry lacks \"") + key + "\"");
  Entry e;
  e.name = name;
  if (!v["dtype"].is_string()) bad("\"dtype\" is not a string");
  try {
    e.dtype = dtype_from_safetensors_name(v["dtype"].get<std::string>());
  } catch (const Error& err) {
    bad(err.what());
  }
  if (!v["shape"].is_array()) bad("\"shape\" is not an array");
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) bad("\"shape\" " + v["shape"].dump() + " holds something other than a non-negative integer");
    if (d.get<uint64_t>() > uint64_t(INT64_MAX)) bad("dimension " + d.dump() + " is too large");
    e.shape.push_back(int64_t(d.get<uint64_t>()));
  }
  const auto& offs = v["data_offsets"];
  if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
    bad("\"data_offsets\" " + offs.dump() + " is not a pair of non-negative integers");
  e.begin = offs[0].get<uint64_t>();
  e.end = offs[1].get<uint64_t>();
  if (e.end < e.begin) bad("\"data_offsets\" " + offs.dump() + " end before they begin");
  // 128-bit so that a hostile shape cannot overflow into a plausible size.
  unsigned __int128 need = dtype_size(e.dtype);
  for (int64_t d : e.shape) need = std::min<unsigned __int128>(need * uint64_t(d), ~uint64_t(0));
  if (need != e.end - e.begin)
    bad(std::string("dtype ") + dtype_safetensors_name(e.dtype) + " and shape " + shape_str(e.shape) + " need " +
        (need >= ~uint64_t(0) ? std::string("more than 2^64") : std::to_string(uint64_t(need))) +
        " bytes, but \"data_offsets\" " + offs.dump() + " span " + std::to_string(e.end - e.begin));
  return e;
}

std::map<std::string, std::string> parse_metadata(const Reader& file, const nlohmann::json& v) {
  if (!v.is_object()) file.fail("\"__metadata__\" is not an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, val] : v.items()) {
    if (!val.is_string()) file.fail("\"__metadata__\" value for '" + k + "' is not a string: " + val.dump());
    out[k] = val.get<std::string>();
  }
  return out;
}

// The tensors must tile [0, buffer_bytes) exactly: no overlap, no gap, no
// trailing bytes, nothing past the end of the file.
void check_layout(const Reader& file, std::vector<Entry>& entries, uint64_t data_start) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor)
      file.fail("tensors '" + prev->name + "' " + range_str(prev->begin, prev->end) + " and '" + e.name + "' " +
                range_str(e.begin, e.end) + " overlap in the data buffer");
    if (e.begin > cursor)
      file.fail("bytes " + range_str(cursor, e.begin) + " of the data buffer belong to no tensor (next is '" + e.name +
                "')");
    cursor = e.end;
    if (e.end > e.begin || !prev) prev = &e;
  }
  const uint64_t buffer_bytes = file.size() - data_start;
  for (const Entry& e : entries)
    if (e.end > buffer_bytes)
      file.fail("tensor '" + e.name + "' needs bytes " + range_str(data_start + e.begin, data_start + e.end) +
                " but the file holds only " + std::to_string(file.size()) + " (the file is truncated)");
  if (cursor < buffer_bytes)
    file.fail(std::to_string(buffer_bytes - cursor) + " trailing bytes after the last tensor (the data ends at byte " +
              std::to_string(data_start + cursor) + " of " + std::to_string(file.size()) + ")");
}

// The header's entries, checked against the file, and where the data starts.
struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
  uint64_t data_start = 0;
};

Header read_header(const Reader& file) {
  if (file.size() < 8)
    file.fail("the file holds " + std::to_string(file.size()) +
              " bytes, fewer than the 8-byte header length that starts every safetensors file");
  uint64_t header_len = 0;
  file.read_at(&header_len, 8, 0, "the header length");  // little-endian (checked in safetensors.cpp)
  if (header_len > file.size() - 8)
    file.fail("header length " + std::to_string(header_len) + " is larger than the rest of the file (" +
              std::to_string(file.size() - 8) + " bytes); the file is truncated or not safetensors");
  if (header_len > kMaxHeaderBytes)
    file.fail("header length " + std::to_string(header_len) + " exceeds the 100 MB limit; the file is corrupt");

  std::string text(header_len, '\0');
  file.read_at(text.data(), header_len, 8, "the header");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    file.fail(std::string("the header is not valid JSON: ") + e.what());
  }
  if (!json.is_object()) file.fail("the header is JSON but not an object");

  Header header;
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__")
      header.metadata = parse_metadata(file, value);
    else
      header.entries.push_back(parse_entry(file, key, value));
  }
  header.data_start = 8 + header_len;
  check_layout(file, header.entries, header.data_start);
  return header;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  Reader file(path);
  Header header = read_header(file);
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (const Entry& e : header.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    if (t.nbytes() > 0) file.read_at(t.data_ptr(), t.nbytes(), header.data_start + e.begin, "tensor '" + e.name + "'");
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

SafetensorsFile map_safetensors(const std::string& path) {
  Reader file(path);
  Header header = read_header(file);
  const auto mapping = map_copy_on_write(file.fd(), file.size());
  if (!mapping) return load_safetensors(path);  // e.g. a file system without mmap
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (const Entry& e : header.entries) {
    char* data = static_cast<char*>(mapping->base) + header.data_start + e.begin;
    Tensor t;
    if (reinterpret_cast<uintptr_t>(data) % dtype_size(e.dtype) == 0) {
      t = Tensor::wrap(data, e.shape, e.dtype, mapping);
    } else {  // an unaligned tensor (valid, but unusual) gets its own aligned copy
      t = Tensor::empty(e.shape, e.dtype, Device::cpu());
      std::memcpy(t.data_ptr(), data, t.nbytes());
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace kiln
