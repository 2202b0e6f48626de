// Loads a Hugging Face causal language model folder with an installed Kiln
// and continues a prompt greedily:
//   generate DIR "Once upon a time" [TOKENS]
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>

using namespace kiln;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: generate MODEL_DIR PROMPT [TOKENS]\n");
    return 2;
  }
  try {
    models::HfCausalLm lm = models::load_hf_causal_lm(argv[1]);
    lm.model->eval();
    const std::vector<int32_t> prompt = lm.tokenizer.encode(argv[2]);
    Generator gen(0);
    // Greedy; the model's own sampling defaults would be models::resolve_sampling({}, lm.sampling_defaults, {}).
    const std::vector<int32_t> all = models::generate(*lm.model, prompt, argc > 3 ? std::atoll(argv[3]) : 24,
                                                      models::Sampling{.temperature = 0}, gen, lm.eos_ids);
    const std::vector<int32_t> fresh(all.begin() + long(prompt.size()), all.end());
    std::printf("%s%s\n", argv[2], lm.tokenizer.decode(fresh).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
