"""A transformers-made fixture folder converted by llama.cpp's own
convert_hf_to_gguf.py, for the GGUF loader's tests (tests/test_gguf.cpp).
The fixtures' tokenizers are trained here, so the converter does not know
their pre-tokenizer's hash; PRE names the type to write (the tests compare
models on token ids, not on text).
    $(bench/torch2_venv.sh) tests/hf/convert_fixture_to_gguf.py "$(scripts/llama_cpp_source.sh)" qwen2 \
        tests/hf/fixtures/qwen3 --outtype f32 --outfile tests/hf/fixtures/qwen3/model-f32.gguf
"""
import sys

llama_cpp, pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, llama_cpp)
import conversion.base as base  # noqa: E402
import convert_hf_to_gguf  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
convert_hf_to_gguf.main()
