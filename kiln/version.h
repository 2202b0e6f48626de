// Kiln's semantic version: the one source of it. CMake reads it into
// project(VERSION) (Kiln_VERSION for find_package users), `kiln --version`
// and `kiln info` print it, kiln serve's KServe v2 server metadata reports it.
#pragma once

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 2
#define KILN_VERSION_PATCH 0
#define KILN_VERSION "0.2.0"

namespace kiln {

// "MAJOR.MINOR.PATCH", as the library was built.
inline const char* version() { return KILN_VERSION; }

}  // namespace kiln
