// The kiln command: train, eval, sample, serve, chat, apply-template, info, ...
#include <CLI/CLI.hpp>
#include <cstdio>

#include "apps/cli/chat_command.h"
#include "apps/cli/data_command.h"
#include "apps/cli/export_command.h"
#include "apps/cli/info.h"
#include "apps/cli/quantize_option.h"
#include "apps/cli/sampling_options.h"
#if KILN_HAVE_SERVER
#include "apps/cli/serve_command.h"
#endif
#include "apps/cli/template_command.h"
#include "apps/cli/text_commands.h"
#include "apps/cli/train_command.h"
#include "kiln/version.h"
#include "apps/plan/plan_cli.h"
#include "apps/recipes/recipe.h"
#include "kiln/core/error.h"
#include "kiln/cpu/runtime_defaults.h"
#include "kiln/distributed/world.h"

int main(int argc, char** argv) {
  kiln::apply_runtime_defaults(argv);
  try {
    kiln::distributed::init_from_environment(&argc, &argv);  // under mpirun: join the job's ranks
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"Kiln: a deep-learning engine in C++20 and CUDA"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::version());
  app.require_subcommand(1);

  std::function<int()> run_train = kiln::cli::add_train_command(app);

  std::string eval_path, eval_device = "cpu", eval_precision = "auto", eval_quantize;
  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint (or a run directory's newest)");
  eval->add_option("checkpoint", eval_path, "checkpoint or run directory")->required();
  eval->add_option("--device", eval_device, "cpu, cuda or cuda:N");
  eval->add_option("--precision", eval_precision, "hf:DIR and gguf:FILE weights: auto (the file's dtype), fp32 or bf16");
  kiln::cli::add_quantize_option(eval, eval_quantize, "hf:DIR language models: int8, int8b, int4 or int4z weights");

  std::string sample_path = "runs/fortunes-gpt", sample_device = "cpu";
  kiln::recipes::SampleOptions so;
  auto* sample = app.add_subcommand("sample", "sample text from a language-model checkpoint");
  sample->add_option("checkpoint", sample_path,
                     "checkpoint, run directory or hf:DIR (a Hugging Face model folder), gguf:FILE (a GGUF file; default: runs/fortunes-gpt)");
  sample->add_option("--prompt", so.prompt, "text to continue");
  sample->add_option("--count", so.count, "number of samples");
  sample->add_option("--max-tokens", so.max_tokens, "tokens per sample");
  kiln::cli::add_sampling_options(sample, so.sampling, "0.8", "40");
  sample->add_option("--seed", so.seed, "sampling seed");
  sample->add_flag("--ignore-eos", so.ignore_eos,
                   "never end a sample at the end of text: each runs to --max-tokens (timing a fixed count)");
  sample->add_option("--precision", so.precision, "hf:DIR and gguf:FILE weights: auto (the file's dtype: bf16 stays bf16), fp32 or bf16");
  sample->add_option("--device", sample_device, "cpu, cuda or cuda:N");
  kiln::cli::add_quantize_option(sample, so.quantize, "quantize the weights: int8, int8b, int4 or int4z");

  std::function<int()> run_tokenize = kiln::cli::add_tokenize_command(app);
  std::function<int()> run_score = kiln::cli::add_score_command(app);
  std::function<int()> run_perplexity = kiln::cli::add_perplexity_command(app);
  std::function<int()> run_classify = kiln::cli::add_classify_command(app);
  std::function<int()> run_embed = kiln::cli::add_embed_command(app);
  std::function<int()> run_export = kiln::cli::add_export_command(app);
  auto* info = app.add_subcommand("info", "describe this machine's CPU and GPUs");
  std::function<int()> run_plan = kiln::plan::add_plan_command(app);
#if KILN_HAVE_SERVER
  std::function<int()> run_serve = kiln::cli::add_serve_command(app);
#else
  const std::function<int()> run_serve = [] { return -1; };  // built without kiln serve (-DKILN_BUILD_SERVER=OFF)
#endif
  std::function<int()> run_chat = kiln::cli::add_chat_command(app);
  std::function<int()> run_data = kiln::cli::add_data_command(app);
  std::function<int()> run_apply_template = kiln::cli::add_apply_template_command(app);

  CLI11_PARSE(app, argc, argv);
  try {
    if (int rc = run_train(); rc >= 0) {
      return rc;
    } else if (*eval) {
      auto r = kiln::recipes::evaluate(eval_path, kiln::Device::parse(eval_device), kiln::cli::print_line,
                                       eval_precision, eval_quantize);
      if (r.accuracy >= 0) std::printf("test accuracy: %.4f\n", r.accuracy);
      if (r.loss >= 0) std::printf("validation: %.4f nats/token, %.4f bits per byte\n", r.loss, r.bits_per_byte);
    } else if (*sample) {
      for (const auto& s : kiln::recipes::sample(sample_path, so, kiln::Device::parse(sample_device)))
        std::printf("%s\n---\n", s.c_str());
    } else if (int rc = run_plan(); rc >= 0) {
      return rc;
    } else if (int rc = run_serve(); rc >= 0) {
      return rc;
    } else if (int rc = run_tokenize(); rc >= 0) {
      return rc;
    } else if (int rc = run_score(); rc >= 0) {
      return rc;
    } else if (int rc = run_perplexity(); rc >= 0) {
      return rc;
    } else if (int rc = run_classify(); rc >= 0) {
      return rc;
    } else if (int rc = run_embed(); rc >= 0) {
      return rc;
    } else if (int rc = run_export(); rc >= 0) {
      return rc;
    } else if (int rc = run_chat(); rc >= 0) {
      return rc;
    } else if (int rc = run_data(); rc >= 0) {
      return rc;
    } else if (int rc = run_apply_template(); rc >= 0) {
      return rc;
    } else if (*info) {
      return kiln::cli::run_info();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: %s%s\n", kiln::distributed::rank_prefix().c_str(), e.what());
    if (kiln::distributed::joined_world_size() > 1) kiln::distributed::abort_job(1);  // the other ranks must not wait for this one
    return 1;
  }
  return 0;
}
