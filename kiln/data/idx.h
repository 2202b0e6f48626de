// Reader for the IDX format of (Fashion-)MNIST: a 4-byte magic (0, 0, type
// code, rank), rank big-endian u32 dimensions, then the elements row-major.
// Files may be gzip-compressed (zlib reads plain files transparently too).
// Only unsigned bytes (type code 0x08) are supported, which is all MNIST-like
// datasets use.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, size == product of dims
};

// Reads the whole file and checks the header and that the data is exactly as
// long as the header says. Every error names the file and what is wrong.
IdxArray read_idx_gz(const std::string& path);

}  // namespace kiln::data
