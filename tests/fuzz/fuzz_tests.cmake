# The parsers' fuzzers (libFuzzer needs clang; Debian's clang-14 and
# libclang-rt-14-dev): what kiln serve reads from a request, what the
# rendezvous store reads from the wire, a model folder's tokenizer.json and
# chat template, fine-tuning data (JSON Lines), GGUF files (header, config,
# tokenizer) and GBNF grammars. Built beside the project, each run for a
# bounded time from its seed corpus.
find_program(KILN_FUZZ_CXX NAMES clang++-14 clang++)
if(NOT KILN_FUZZ_CXX)
  message(STATUS "clang++ not found: the fuzzers are not built")
  return()
endif()

# Sanitizer flags for every fuzzer object; libFuzzer's main() joins at the link.
# Line tables only: a crash's stack still names file and line, and the objects
# compile ~15% faster than with full debug information.
set(KILN_FUZZ_FLAGS -std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined)

# kiln_fuzz_object(SOURCE OUT_VAR [flags...]): SOURCE compiled once with the
# sanitizers (and the flags), an object every fuzzer that lists it links, so
# the text sources most fuzzers share build once and in parallel rather than
# once per fuzzer.
function(kiln_fuzz_object source out_var)
  set(object ${CMAKE_CURRENT_BINARY_DIR}/fuzz-objects/${source}.o)
  set(${out_var} ${object} PARENT_SCOPE)
  get_property(made GLOBAL PROPERTY KILN_FUZZ_OBJECTS)
  if(object IN_LIST made)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY KILN_FUZZ_OBJECTS ${object})
  get_filename_component(folder ${object} DIRECTORY)
  file(MAKE_DIRECTORY ${folder})
  add_custom_command(
    OUTPUT ${object}
    COMMAND ${KILN_FUZZ_CXX} ${KILN_FUZZ_FLAGS} ${ARGN} -I${CMAKE_CURRENT_SOURCE_DIR} -MD -MF ${object}.d
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${source} -o ${object}
    DEPENDS ${source}
    DEPFILE ${object}.d
    COMMENT "Compiling ${source} for the fuzzers")
endfunction()

# kiln_fuzzer(NAME FUZZER_SOURCE SOURCES... [LIBS flags...] [DEFINES flags...]):
# builds kiln_NAME_fuzzer and adds the test fuzz.NAME, seeded from
# tests/fuzz/corpus/NAME. DEFINES apply to FUZZER_SOURCE alone.
function(kiln_fuzzer name fuzzer)
  cmake_parse_arguments(PARSE_ARGV 2 F "" "" "LIBS;DEFINES")
  set(binary ${CMAKE_CURRENT_BINARY_DIR}/kiln_${name}_fuzzer)
  set(sources ${F_UNPARSED_ARGUMENTS})
  list(FILTER sources INCLUDE REGEX "\\.cpp$")  # the headers reach the objects through their depfiles
  set(objects)
  foreach(source ${sources})
    kiln_fuzz_object(${source} object)
    list(APPEND objects ${object})
  endforeach()
  kiln_fuzz_object(${fuzzer} main ${F_DEFINES})  # (each fuzzer's own file, so its DEFINES are its alone)
  add_custom_command(
    OUTPUT ${binary}
    COMMAND ${KILN_FUZZ_CXX} -fsanitize=fuzzer,address,undefined ${main} ${objects} ${F_LIBS} -o ${binary}
    DEPENDS ${main} ${objects}
    COMMENT "Linking the ${name} fuzzer")
  add_custom_target(build_${name}_fuzzer ALL DEPENDS ${binary})
  set(corpus ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/${name})
  file(MAKE_DIRECTORY ${corpus})
  add_test(NAME fuzz.${name}
           COMMAND ${binary} -max_total_time=20 -print_final_stats=1 -rss_limit_mb=1024 -verbosity=0 -print_funcs=0
                   ${corpus} ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  set_tests_properties(fuzz.${name} PROPERTIES LABELS "cpu;fuzz" TIMEOUT 120)
endfunction()

file(GLOB KILN_JINJA_SOURCES RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} CONFIGURE_DEPENDS kiln/text/jinja/*.cpp
     kiln/text/jinja/*.h)
kiln_fuzzer(requests tests/fuzz/request_fuzzer.cpp apps/serve/requests.cpp apps/serve/requests.h
            apps/serve/encoder_requests.cpp
            apps/serve/ollama_requests.cpp apps/serve/ollama_requests.h apps/serve/request_fields.h
            apps/serve/anthropic_requests.cpp apps/serve/anthropic_requests.h
            apps/serve/responses_requests.cpp apps/serve/responses_requests.h
            models/common/sampling.cpp models/common/sampling.h kiln/text/base64.cpp kiln/text/base64.h
            kiln/text/chat_template.cpp kiln/text/chat_template.h kiln/text/utf8.cpp kiln/text/utf8.h
            kiln/text/grammar/gbnf.cpp kiln/text/grammar/gbnf.h kiln/text/grammar/json_grammar.cpp
            kiln/text/grammar/json_grammar.h kiln/text/grammar/json_schema.cpp kiln/text/grammar/json_schema.h
            kiln/text/grammar/regex_gbnf.cpp kiln/text/grammar/regex_gbnf.h kiln/text/grammar/json_number_gbnf.cpp
            kiln/text/grammar/json_number_gbnf.h
            kiln/text/grammar/matcher.cpp kiln/text/grammar/matcher.h kiln/text/grammar/token_trie.cpp
            kiln/text/grammar/token_trie.h kiln/text/tool_calls.cpp kiln/text/tool_calls.h
            kiln/text/tool_call_formats.cpp kiln/text/tool_call_grammar.cpp
            kiln/text/tool_call_parameters.cpp kiln/text/tool_call_parameters.h kiln/text/python_literal.cpp
            kiln/text/python_literal.h kiln/text/tool_call_elements.cpp kiln/text/tool_call_elements.h
            kiln/text/tool_call_cursor.h kiln/text/tool_call_probe.cpp kiln/text/tool_call_probe.h
            kiln/text/grammar/text_then_mark.cpp kiln/text/grammar/text_then_mark.h
            ${KILN_JINJA_SOURCES} LIBS -lutf8proc)
kiln_fuzzer(store tests/fuzz/store_fuzzer.cpp kiln/distributed/store_protocol.cpp kiln/distributed/store_protocol.h)
kiln_fuzzer(template tests/fuzz/template_fuzzer.cpp ${KILN_JINJA_SOURCES} kiln/text/utf8.cpp kiln/text/utf8.h
            LIBS -lutf8proc)
file(GLOB KILN_TEXT_SOURCES RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} CONFIGURE_DEPENDS kiln/text/*.cpp kiln/text/*.h
     kiln/text/jinja/*.cpp kiln/text/jinja/*.h kiln/text/grammar/*.cpp kiln/text/grammar/*.h)
kiln_fuzzer(tokenizer tests/fuzz/tokenizer_fuzzer.cpp ${KILN_TEXT_SOURCES} LIBS -lpcre2-8 -lutf8proc)
kiln_fuzzer(sft_data tests/fuzz/sft_data_fuzzer.cpp apps/recipes/sft_data.cpp apps/recipes/sft_data.h
            kiln/io/text_file.cpp kiln/io/text_file.h ${KILN_TEXT_SOURCES}
            LIBS -lpcre2-8 -lutf8proc DEFINES -DKILN_SOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR})
kiln_fuzzer(gguf tests/fuzz/gguf_fuzzer.cpp kiln/io/gguf_parse.cpp kiln/io/gguf_parse.h
            models/hf/gguf_architectures.cpp models/hf/gguf_architectures.h models/hf/gguf_encoder_config.cpp
            models/hf/gguf_encoder_names.cpp models/hf/gguf_encoder_names.h
            models/hf/ollama_store.cpp models/hf/ollama_store.h kiln/io/text_file.cpp kiln/io/text_file.h
            models/hf/sampling_defaults.cpp models/hf/sampling_defaults.h models/common/sampling.cpp
            models/common/sampling.h models/llama/rope.cpp models/llama/rope.h
            ${KILN_TEXT_SOURCES}
            LIBS -lpcre2-8 -lutf8proc)
kiln_fuzzer(grammar tests/fuzz/grammar_fuzzer.cpp kiln/text/grammar/gbnf.cpp kiln/text/grammar/gbnf.h
            kiln/text/grammar/matcher.cpp kiln/text/grammar/matcher.h kiln/text/grammar/token_trie.cpp
            kiln/text/grammar/token_trie.h)
