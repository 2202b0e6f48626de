# End-to-end tests of the kiln command, as a user runs it. Each scenario is a
# script in tests/cli/ that works in a fresh temporary directory (so no test
# can pass on an earlier run's checkpoint), checks every command's exit
# status, and greps its output (tests/cli/lib.sh).
foreach(scenario train_eval_mlp train_sample_gpt resume errors cuda_without_gpu run_on_device_without_gpu plan serve
                 serve_access
                 serve_gpu_bench classify hf_models hf_export hf_chat hf_quantized sft sft_learns classify_finetune
                 apply_template hf_qwen2_chat hf_embed hf_grammar hf_tools hf_reasoning chat_tools hf_sampling
                 hf_ollama_api hf_anthropic_api hf_responses_api hf_infill)
  add_test(NAME cli.${scenario} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/${scenario}.sh)
  set_tests_properties(cli.${scenario} PROPERTIES LABELS cpu ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>")
endforeach()

# Real vocabularies against `tokenizers`: the corpus is made in a cache (70 MB).
add_executable(kiln_vocab_tests tests/hf/test_vocab_corpus.cpp tests/main.cpp)
target_link_libraries(kiln_vocab_tests PRIVATE kiln GTest::gtest)
add_test(NAME cli.hf_vocabs COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/hf_vocabs.sh)
set_tests_properties(cli.hf_vocabs PROPERTIES LABELS "cpu;oracle" TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>;KILN_VOCAB_TESTS=$<TARGET_FILE:kiln_vocab_tests>")

# Tests that check Kiln against an external reference (transformers, tokenizers,
# peft, the openai client, torchrun from the PyTorch 2 environment): they fail
# without it, or report Skipped under KILN_ORACLES=optional (tests/cli/lib.sh).
set_tests_properties(cli.sft cli.hf_export cli.hf_chat cli.classify_finetune cli.hf_qwen2_chat cli.hf_embed cli.hf_grammar cli.hf_tools cli.hf_reasoning
                     cli.hf_sampling cli.hf_ollama_api cli.hf_anthropic_api cli.hf_responses_api cli.hf_infill
                     PROPERTIES LABELS "cpu;oracle" SKIP_RETURN_CODE 77)

if(TARGET bench_gpu)
  add_test(NAME cli.gpu_bench_on_cpu COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/gpu_bench_on_cpu.sh)
  set_tests_properties(cli.gpu_bench_on_cpu PROPERTIES LABELS cpu ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>;BENCH_GPU=$<TARGET_FILE:bench_gpu>")
endif()

add_test(NAME cli.info COMMAND kiln_cli info)
set_tests_properties(cli.info PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "CPU: .*cores: .*SIMD: .*f32: .*bf16: .*GPU")

# Where a GPU exists the script reports SKIPPED and so does ctest.
set_tests_properties(cli.cuda_without_gpu PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED: this machine has a GPU")

# Data parallelism under mpirun (oversubscribed on CI's 2 cores; root needs
# OpenMPI's explicit consent).
if(MPI_C_FOUND)
  foreach(scenario dist_train pipeline_train)
    add_test(NAME cli.${scenario} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/${scenario}.sh)
    set_tests_properties(cli.${scenario} PROPERTIES LABELS "cpu;dist" TIMEOUT 300
                         ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>;${KILN_MPI_ENV}")
  endforeach()
endif()

# The same launched torchrun-style, over Gloo (no mpirun).
if(KILN_HAVE_GLOO)
  add_test(NAME cli.torchrun_train COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/torchrun_train.sh)
  set_tests_properties(cli.torchrun_train PROPERTIES LABELS "cpu;dist;oracle" TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>")
endif()

# The installed library and a project that find_package(Kiln)s it (examples/).
add_test(NAME cli.install_consumer COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/install_consumer.sh)
set_tests_properties(cli.install_consumer PROPERTIES LABELS cpu TIMEOUT 600
                     ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>;KILN_BUILD_DIR=${CMAKE_BINARY_DIR}")
