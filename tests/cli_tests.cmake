# End-to-end tests of the kiln command, as a user runs it.
set(KILN_CLI_RUN ${CMAKE_CURRENT_BINARY_DIR}/cli-test-runs)

add_test(NAME cli.info COMMAND kiln_cli info)
set_tests_properties(cli.info PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "CPU: .*cores: .*SIMD: .*GPU")

add_test(NAME cli.train_mlp_short
         COMMAND kiln_cli train fashion-mlp --steps 30 --batch-size 64 --no-progress --out ${KILN_CLI_RUN}/mlp)
set_tests_properties(cli.train_mlp_short PROPERTIES LABELS cpu
                     PASS_REGULAR_EXPRESSION "test accuracy: 0\\.[5-9].*checkpoint:")

add_test(NAME cli.eval_mlp COMMAND kiln_cli eval ${KILN_CLI_RUN}/mlp)
set_tests_properties(cli.eval_mlp PROPERTIES LABELS cpu DEPENDS cli.train_mlp_short
                     PASS_REGULAR_EXPRESSION "test accuracy: 0\\.[5-9]")

add_test(NAME cli.train_gpt_short
         COMMAND kiln_cli train fortunes-gpt --steps 4 --batch-size 4 --no-progress --out ${KILN_CLI_RUN}/gpt)
set_tests_properties(cli.train_gpt_short PROPERTIES LABELS cpu
                     PASS_REGULAR_EXPRESSION "bits per byte.*sample 1:")

add_test(NAME cli.sample_gpt COMMAND kiln_cli sample ${KILN_CLI_RUN}/gpt --count 2 --max-tokens 8 --prompt "The ")
set_tests_properties(cli.sample_gpt PROPERTIES LABELS cpu DEPENDS cli.train_gpt_short
                     PASS_REGULAR_EXPRESSION "The .*---.*The .*---")

# Errors are messages, not crashes.
add_test(NAME cli.unknown_recipe_is_an_error COMMAND kiln_cli train no-such-recipe)
set_tests_properties(cli.unknown_recipe_is_an_error PROPERTIES LABELS cpu WILL_FAIL TRUE)
add_test(NAME cli.eval_missing_dir_message COMMAND kiln_cli eval ${KILN_CLI_RUN}/does-not-exist)
set_tests_properties(cli.eval_missing_dir_message PROPERTIES LABELS cpu
                     PASS_REGULAR_EXPRESSION "kiln: error: .*does-not-exist.* does not exist")
# Where a GPU exists, the run simply works and the test reports as skipped.
add_test(NAME cli.cuda_without_gpu_message
         COMMAND kiln_cli train fashion-mlp --steps 1 --device cuda --no-progress --out ${KILN_CLI_RUN}/cuda)
set_tests_properties(cli.cuda_without_gpu_message PROPERTIES LABELS cpu
                     PASS_REGULAR_EXPRESSION "kiln: error: .*CUDA is not available.*--device cpu"
                     SKIP_REGULAR_EXPRESSION "device: cuda:0")
