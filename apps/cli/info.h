#pragma once
#ifndef KILN_VERSION
#define KILN_VERSION "0.1.0"
#endif

namespace kiln::cli {
int run_info();
}  // namespace kiln::cli
