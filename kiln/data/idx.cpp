#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "kiln/core/error.h"

namespace kiln::data {

namespace {

// Closes the gzFile on every exit path, including throws.
struct GzFile {
  gzFile f = nullptr;
  ~GzFile() {
    if (f) gzclose(f);
  }
};

// zlib's message, without the "<path>: " prefix it adds (we name the file already).
std::string gz_error_text(gzFile f, const std::string& path) {
  int code = 0;
  const char* msg = gzerror(f, &code);
  std::string s = msg && *msg ? msg : "unknown zlib error";
  if (s.rfind(path + ": ", 0) == 0) s = s.substr(path.size() + 2);
  return s;
}

// Reads up to `n` bytes into `out`; returns how many were read. A zlib error
// (not a plain end of file) throws.
size_t read_some(gzFile f, const std::string& path, uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    unsigned chunk = unsigned(std::min<size_t>(n - done, size_t(1) << 26));
    int got = gzread(f, out + done, chunk);
    if (got < 0)
      KILN_FAIL(path, ": not a valid gzip file or corrupt data (", gz_error_text(f, path),
                "); delete it and reinstall the dataset");
    if (got == 0) break;
    done += size_t(got);
  }
  // A truncated gzip stream ends "cleanly" from gzread's point of view, but
  // gzerror then reports Z_BUF_ERROR; surface it so the message says why.
  int code = Z_OK;
  gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END)
    KILN_FAIL(path, ": gzip stream is damaged (", gz_error_text(f, path),
              "); the file is probably truncated: delete it and reinstall the dataset");
  return done;
}

}  // namespace

IdxArray read_idx_gz(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_regular_file(path, ec), path, ": file not found");
  GzFile gz;
  gz.f = gzopen(path.c_str(), "rb");
  KILN_CHECK(gz.f, path, ": cannot open for reading");

  uint8_t magic[4];
  size_t got = read_some(gz.f, path, magic, 4);
  KILN_CHECK(got == 4, path, ": file is too short to hold an IDX header (", got, " bytes)");
  KILN_CHECK(magic[0] == 0 && magic[1] == 0, path, ": wrong magic number (first bytes ", int(magic[0]), ", ",
             int(magic[1]), ", expected 0, 0); this is not an IDX file");
  KILN_CHECK(magic[2] == 0x08, path, ": IDX element type code 0x", std::hex, int(magic[2]),
             " is not supported (only 0x08, unsigned bytes)");
  int rank = magic[3];
  KILN_CHECK(rank >= 1 && rank <= 4, path, ": IDX header says rank ", rank, ", expected 1 to 4");

  IdxArray out;
  // Bound the element count so a corrupt header cannot ask for absurd memory.
  const uint64_t max_elements = uint64_t(1) << 34;
  uint64_t numel = 1;
  for (int d = 0; d < rank; ++d) {
    uint8_t b[4];
    KILN_CHECK(read_some(gz.f, path, b, 4) == 4, path, ": file ends inside the IDX header");
    uint64_t dim = (uint64_t(b[0]) << 24) | (uint64_t(b[1]) << 16) | (uint64_t(b[2]) << 8) | b[3];
    out.dims.push_back(int64_t(dim));
    numel *= dim;
    KILN_CHECK(numel <= max_elements, path, ": IDX header claims more than ", max_elements,
               " elements; the header is corrupt");
  }

  // Grow as data actually arrives, so a header promising more than the file
  // holds costs no more memory than the file.
  out.data.resize(size_t(std::min<uint64_t>(numel, uint64_t(1) << 26)));
  size_t have = 0;
  while (have < numel) {
    if (have == out.data.size()) out.data.resize(size_t(std::min<uint64_t>(numel, uint64_t(have) * 2)));
    size_t n = read_some(gz.f, path, out.data.data() + have, out.data.size() - have);
    if (n == 0) break;
    have += n;
  }
  KILN_CHECK(have == numel, path, ": short data: the header promises ", numel, " bytes of elements but the file holds ",
             have, "; the file is truncated, delete it and reinstall the dataset");
  uint8_t extra;
  KILN_CHECK(read_some(gz.f, path, &extra, 1) == 0, path, ": file holds more data than its header describes (",
             numel, " bytes); the file is corrupt");
  return out;
}

}  // namespace kiln::data
