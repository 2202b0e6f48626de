#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/cpu/isa.h"
#include "kiln/cpu/runtime_defaults.h"

// KILN_ISA_PASS=LEVEL (tests/isa_tests.cmake): run capped at LEVEL, or skip
// (exit 77) when LEVEL is not below this CPU's own.
int apply_isa_pass() {
  const char* pass = std::getenv("KILN_ISA_PASS");
  if (!pass) return 0;
  using kiln::cpu::Isa;
  const Isa own = kiln::cpu::detected_isa();
  for (Isa level : {Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx})
    if (std::string(pass) == kiln::cpu::isa_name(level)) {
      if (int(level) >= int(own)) {
        std::printf("SKIPPED: this CPU's own level is %s; the main pass covers %s\n", kiln::cpu::isa_name(own), pass);
        return 77;
      }
      setenv("KILN_MAX_ISA", pass, 1);
      return 0;
    }
  std::fprintf(stderr, "KILN_ISA_PASS=%s names no level\n", pass);
  return 2;
}

int main(int argc, char** argv) {
  if (int skip = apply_isa_pass()) return skip;
  kiln::apply_runtime_defaults(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
