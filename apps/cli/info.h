#pragma once
#include "kiln/version.h"

namespace kiln::cli {
int run_info();
}  // namespace kiln::cli
