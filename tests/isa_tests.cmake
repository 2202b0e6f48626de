# The ISA-sensitive tests once more under each instruction set below this
# machine's own (KILN_MAX_ISA, kiln/cpu/isa.h), so an AVX-512 machine also
# runs the AVX2 paths an AVX2-only CPU takes. Each pass's tests carry the
# label isa_<level> and the suffix .isa_<level>, so a failure names its
# path. A pass at or above the machine's own level reports as skipped
# (tests/main.cpp, tests/isa_pass.sh): the main pass already ran it.
#
# What each pass covers follows what differs between the levels: below
# AVX-512, every f32 path (Kiln's loops, oneDNN's and OpenBLAS's kernels),
# so the whole set; from AVX-512 up, only the bf16 paths (native bf16
# products and attention kernels, or the f32 fallback), so the tests of ops
# and bf16 but not the data-parallel CLI runs, whose f32 paths the levels
# share. The Hugging Face parity tests (transformers' answers) run in every pass,
# and so do the planner's memory predictions against measured peaks, which
# follow each level's kernels (oneDNN's or Kiln's, native bf16 or staged).
set(KILN_ISA_OP_TESTS "DeterminismAcrossThreads.*:Ops.*:PlanMemory.*:CpuNnOps*:FusedOps.*:ParityTorch*:Amp.*:NanPropagation.*:Autograd.*:Fixtures/CausalLms.*:CausalLmsBf16.*:CausalLmsF16.*:Fixtures/Classifiers.*:Quantized.*:Fixtures/QuantizedModels.*")
foreach(level avx2 avx512 avx512_bf16)
  gtest_discover_tests(kiln_tests TEST_SUFFIX .isa_${level} TEST_FILTER "${KILN_ISA_OP_TESTS}" DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS isa_${level} ENVIRONMENT "KILN_ISA_PASS=${level}" SKIP_RETURN_CODE 77)
endforeach()
if(MPI_C_FOUND)
  foreach(scenario dist_train pipeline_train)
    add_test(NAME cli.${scenario}.isa_avx2
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/isa_pass.sh avx2 bash
                     ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/${scenario}.sh)
    set_tests_properties(cli.${scenario}.isa_avx2 PROPERTIES LABELS "cpu;dist;isa_avx2" TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>;${KILN_MPI_ENV}")
  endforeach()
endif()
if(KILN_HAVE_GLOO)
  add_test(NAME cli.torchrun_train.isa_avx2
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/isa_pass.sh avx2 bash
                   ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/torchrun_train.sh)
  set_tests_properties(cli.torchrun_train.isa_avx2 PROPERTIES LABELS "cpu;dist;isa_avx2" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>")
endif()
