"""A transformers-made fixture folder converted by llama.cpp's own
convert_hf_to_gguf.py, for the GGUF loader's tests (tests/test_gguf.cpp).
The fixtures' tokenizers are trained here, so the converter does not know
their pre-tokenizer's hash; PRE names the type to write (the tests compare
models on token ids, not on text).
    $(bench/torch2_venv.sh) tests/hf/convert_fixture_to_gguf.py "$(scripts/llama_cpp_source.sh)" qwen2 \
        tests/hf/fixtures/qwen3 --outtype f32 --outfile tests/hf/fixtures/qwen3/model-f32.gguf
"""
import sys

import transformers

llama_cpp, pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, llama_cpp)
import conversion.base as base  # noqa: E402
import conversion.phi as phi  # noqa: E402
import convert_hf_to_gguf  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
# A fixture's tokenizer.json is read as it is: AutoTokenizer would add its model type's defaults (Qwen2Tokenizer's
# <|endoftext|>, an id past the vocabulary).
transformers.AutoTokenizer.from_pretrained = lambda *a, **kw: transformers.PreTrainedTokenizerFast.from_pretrained(*a, **kw)
# The SentencePiece families (Gemma, Gemma 2, Phi-3) read a tokenizer.model the fixtures do not have; their
# tokenizer.json (a Llama-style BPE with byte fallback) is converted as llama.cpp converts such files.


def sentencepiece_from_tokenizer_json(self, add_to_gguf=True):
    try:
        self._set_vocab_llama_hf()
    except TypeError as e:  # a byte-level BPE: the families that try SentencePiece first (Qwen2) then take GPT-2's
        raise FileNotFoundError(str(e))


base.TextModel._set_vocab_sentencepiece = sentencepiece_from_tokenizer_json
phi.Phi3MiniModel.set_vocab = lambda self: self._set_vocab_llama_hf()
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
convert_hf_to_gguf.main()
