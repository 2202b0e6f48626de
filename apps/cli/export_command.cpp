#include "apps/cli/export_command.h"

#include <cstdio>
#include <memory>

#include "apps/cli/quantize_option.h"
#include "apps/recipes/export.h"

namespace kiln::cli {

std::function<int()> add_export_command(CLI::App& app) {
  struct Options {
    std::string source, format = "hf", out, quantize, gguf_type = "f16";
    bool merge = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("export", "write a run (or hf:DIR, gguf:FILE) as a Hugging Face folder that transformers loads, or a GGUF file");
  cmd->add_option("source", o->source, "run directory, checkpoint, hf:DIR or gguf:FILE")->required();
  cmd->add_option("--format", o->format, "hf: config.json, model.safetensors and tokenizer.json; peft: a LoRA run's "
                  "adapters (adapter_config.json, adapter_model.safetensors); gguf: one file llama.cpp loads "
                  "(the language model families Kiln reads from GGUF)")
      ->check(CLI::IsMember({"hf", "peft", "gguf"}));
  cmd->add_flag("--merge", o->merge, "with --format hf or gguf: a LoRA run's adapters merged into its base's weights");
  cmd->add_option("--out", o->out, "the folder (hf, peft: must not exist, or be empty) or file (gguf: must not exist) "
                  "to write")->required();
  cmd->add_option("--gguf-type", o->gguf_type, "with --format gguf: the matrices' type (norms stay f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  add_quantize_option(cmd, o->quantize,
                      "write the weights quantized (int8, int8b, int4 or int4z; Kiln's own format, which Kiln loads as "
                      "hf:DIR and transformers does not)");
  return [cmd, o]() -> int {
    if (!*cmd) return -1;
    if (o->format == "peft") {
      KILN_CHECK(o->quantize.empty() && !o->merge, "--format peft writes the adapters as they trained: no --quantize "
                 "or --merge");
      recipes::export_peft(o->source, o->out);
      std::printf("kiln export: wrote %s (load it with peft.PeftModel.from_pretrained(base, \"%s\"))\n",
                  o->out.c_str(), o->out.c_str());
      return 0;
    }
    if (o->format == "gguf") {
      KILN_CHECK(o->quantize.empty(), "--format gguf takes --gguf-type (f32, f16, bf16 or q8_0), not --quantize");
      for (const std::string& note : recipes::export_gguf(o->source, o->out, o->gguf_type, o->merge))
        std::fprintf(stderr, "kiln export: note: %s\n", note.c_str());
      std::printf("kiln export: wrote %s, %s (load it with llama.cpp, or with Kiln as gguf:%s)\n", o->out.c_str(),
                  o->gguf_type.c_str(), o->out.c_str());
      return 0;
    }
    KILN_CHECK(!o->merge || o->quantize.empty(), "--merge and --quantize do not combine; export merged, then quantize "
               "that folder (kiln export hf:DIR --quantize int8 --out ...)");
    if (o->merge)
      recipes::export_sft_hf(o->source, o->out, true);
    else
      recipes::export_hf(o->source, o->out, o->quantize);
    if (o->quantize.empty())
      std::printf("kiln export: wrote %s (load it with AutoModelForCausalLM.from_pretrained, or as hf:%s)\n",
                  o->out.c_str(), o->out.c_str());
    else
      std::printf("kiln export: wrote %s, %s (load it with Kiln as hf:%s)\n", o->out.c_str(), o->quantize.c_str(),
                  o->out.c_str());
    return 0;
  };
}

}  // namespace kiln::cli
