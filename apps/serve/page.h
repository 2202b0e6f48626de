// The page at `/`: plain HTML and JavaScript, built into the binary (no
// build step, nothing fetched from the internet). "Try it" classifies text,
// streams completions and classifies Fashion-MNIST test images; "Watch it"
// plots the loss, evaluation and throughput curves of the runs under --runs
// from their metrics.jsonl, refreshing while they train.
//
// Query parameters run a step on load, for scripts and the browser test:
// ?classify=TEXT&model=NAME classifies TEXT with model NAME, ?image=N
// classifies test image N, ?prompt=TEXT streams a completion of TEXT.
#pragma once
#include <string>

namespace kiln::serve {

const std::string& index_page();

}  // namespace kiln::serve
