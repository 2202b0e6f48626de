// Byte sizes as people write them: "2GiB", "512MiB", "1.5GB", "300M".
#pragma once
#include <cstddef>
#include <string>

namespace kiln {

// Binary units (KiB, MiB, GiB, TiB, and K/M/G/T) are powers of 1024; decimal
// ones (kB, MB, GB, TB) powers of 1000; a bare number is bytes. Throws a
// message with examples for anything else.
size_t parse_bytes(const std::string& text);
// "1.50 GiB", "512.0 MiB", "12 KiB", "100 B".
std::string format_bytes(double bytes);

}  // namespace kiln
