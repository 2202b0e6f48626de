// kiln/io/checkpoint: save, find the newest complete one, load, prune.
#include <gtest/gtest.h>

#include <cstring>

#include "io_test_util.h"
#include "kiln/io/checkpoint.h"

using namespace kiln;
using namespace kiln::io_test;

namespace {

std::vector<float> floats(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::f32);
  std::vector<float> out(size_t(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.data_ptr(), t.nbytes());
  return out;
}

NamedTensors model_at(float v) {
  return {{"wte.weight", Tensor::from_vector<float>({v, v + 1, v + 2, v + 3}, {2, 2})},
          {"ln_f.bias", Tensor::from_vector<float>({-v}, {1})}};
}

NamedTensors optimizer_at(float v) {
  return {{"wte.weight.m", Tensor::from_vector<float>({v / 10, v / 20, 0, 1}, {2, 2})},
          {"step", Tensor::scalar(double(v), DType::i64)}};
}

nlohmann::json state_at(int64_t step) {
  return {{"step", step},
          {"rng", {{"seed", 1234}, {"offset", uint64_t(1) << 40}}},
          {"data", {{"epoch", 2}, {"position", step * 8}}},
          {"config", {{"n_layer", 2}, {"n_embd", 4}}}};
}

}  // namespace

class IoCheckpoint : public ScratchDir {
 protected:
  std::string out() const { return path("run"); }
  void save(int64_t step, int keep_last = 0) {
    save_checkpoint(out(), step, model_at(float(step)), optimizer_at(float(step)), state_at(step), keep_last);
  }
  std::vector<int64_t> steps() const {
    std::vector<int64_t> s;
    for (const auto& c : list_checkpoints(out())) s.push_back(c.step);
    return s;
  }
};

TEST_F(IoCheckpoint, SaveFindLatestAndLoad) {
  EXPECT_FALSE(latest_checkpoint(out()).has_value());  // out_dir does not exist yet
  save(100);
  save(500);
  EXPECT_EQ(listing("run"), (std::vector<std::string>{"step_00000100", "step_00000500"}));
  EXPECT_EQ(listing("run/step_00000500"),
            (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));
  auto latest = latest_checkpoint(out());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, path("run/step_00000500"));

  Checkpoint ck = load_checkpoint(*latest);
  EXPECT_EQ(ck.step, 500);
  EXPECT_EQ(ck.state, state_at(500));
  EXPECT_EQ(ck.state["rng"]["offset"].get<uint64_t>(), uint64_t(1) << 40);
  ASSERT_EQ(ck.model.size(), 2u);
  EXPECT_EQ(floats(ck.model.at("wte.weight")), (std::vector<float>{500, 501, 502, 503}));
  EXPECT_EQ(ck.model.at("wte.weight").shape(), (Shape{2, 2}));
  EXPECT_EQ(floats(ck.model.at("ln_f.bias")), std::vector<float>{-500});
  ASSERT_EQ(ck.optimizer.size(), 2u);
  EXPECT_EQ(floats(ck.optimizer.at("wte.weight.m")), (std::vector<float>{50, 25, 0, 1}));
  EXPECT_EQ(*ck.optimizer.at("step").data<int64_t>(), 500);

  // The older one is still loadable, and state.json is readable JSON with the step on top.
  EXPECT_EQ(load_checkpoint(path("run/step_00000100")).step, 100);
  auto raw = nlohmann::json::parse(read_bytes(path("run/step_00000500/state.json")));
  EXPECT_EQ(raw["step"], 500);
  EXPECT_EQ(raw["format"], "kiln-checkpoint");
}

TEST_F(IoCheckpoint, LatestIsNumericNotLexical) {
  save(99999999);
  save(100000000);  // nine digits sorts before "step_99999999" as a string
  save(7);
  EXPECT_EQ(latest_checkpoint(out()), path("run/step_100000000"));
  EXPECT_EQ(steps(), (std::vector<int64_t>{7, 99999999, 100000000}));
}

TEST_F(IoCheckpoint, IncompleteCheckpointsAreIgnored) {
  save(500);
  // A save that crashed before its rename: a complete-looking .tmp directory.
  fs::copy(path("run/step_00000500"), path("run/step_00000900.tmp"));
  // A directory with the right name but missing files (e.g. a half copy by hand).
  fs::create_directory(path("run/step_00000800"));
  fs::copy_file(path("run/step_00000500/model.safetensors"), path("run/step_00000800/model.safetensors"));
  // Names that are not checkpoints at all.
  fs::create_directory(path("run/step_abc"));
  write_bytes(path("run/step_00000999"), "a file, not a directory");
  fs::create_directory(path("run/logs"));

  EXPECT_EQ(latest_checkpoint(out()), path("run/step_00000500"));
  EXPECT_EQ(steps(), std::vector<int64_t>{500});
  expect_error([&] { load_checkpoint(path("run/step_00000800")); },
               {path("run/step_00000800"), "state.json is missing"});
}

TEST_F(IoCheckpoint, CorruptOrTruncatedFilesAreRejected) {
  save(500);
  const std::string dir = path("run/step_00000500");
  const std::string model = dir + "/model.safetensors";
  std::string good = read_bytes(model);
  write_bytes(model, good.substr(0, good.size() - 3));
  expect_error([&] { load_checkpoint(dir); }, {model, "needs bytes", "truncated"});

  write_bytes(model, good);
  const std::string opt = dir + "/optimizer.safetensors";
  std::string bad = read_bytes(opt);
  bad[8] = '#';  // break the JSON header
  write_bytes(opt, bad);
  expect_error([&] { load_checkpoint(dir); }, {opt, "not valid JSON"});

  save(500);  // restore a good checkpoint, then break state.json
  write_bytes(dir + "/state.json", "{\"format\": \"kiln-checkpoint\", \"step\": ");
  expect_error([&] { load_checkpoint(dir); }, {dir + "/state.json", "not valid JSON"});
  write_bytes(dir + "/state.json", R"({"format": "kiln-checkpoint", "version": 1, "step": 400, "state": {}})");
  expect_error([&] { load_checkpoint(dir); }, {dir, "says step 400", "named for step 500"});
  write_bytes(dir + "/state.json", R"({"step": 500})");
  expect_error([&] { load_checkpoint(dir); }, {dir + "/state.json", "not a Kiln checkpoint"});
  fs::remove(dir + "/optimizer.safetensors");
  expect_error([&] { load_checkpoint(dir); }, {dir});
  expect_error([&] { load_checkpoint(path("run/step_00000600")); }, {path("run/step_00000600"), "no such directory"});
}

TEST_F(IoCheckpoint, ResavingAStepReplacesIt) {
  save(500);
  save_checkpoint(out(), 500, model_at(7), optimizer_at(7), {{"note", "second"}});
  Checkpoint ck = load_checkpoint(path("run/step_00000500"));
  EXPECT_EQ(ck.state, (nlohmann::json{{"note", "second"}}));
  EXPECT_EQ(floats(ck.model.at("ln_f.bias")), std::vector<float>{-7});
  EXPECT_EQ(listing("run"), std::vector<std::string>{"step_00000500"});  // no .tmp or .old left
}

TEST_F(IoCheckpoint, StaleTmpOfTheSameStepIsReplaced) {
  fs::create_directories(path("run/step_00000500.tmp"));
  write_bytes(path("run/step_00000500.tmp/model.safetensors"), "garbage from a crash");
  save(500);
  EXPECT_EQ(listing("run"), std::vector<std::string>{"step_00000500"});
  EXPECT_EQ(load_checkpoint(path("run/step_00000500")).step, 500);
}

TEST_F(IoCheckpoint, FailedSaveLeavesNoDirectory) {
  save(100);
  NamedTensors dup = {{"a", Tensor::scalar(1.0)}, {"a", Tensor::scalar(2.0)}};
  expect_error([&] { save_checkpoint(out(), 200, dup, {}, {}); }, {"'a' appears twice"});
  EXPECT_EQ(listing("run"), std::vector<std::string>{"step_00000100"});
  EXPECT_EQ(latest_checkpoint(out()), path("run/step_00000100"));
}

TEST_F(IoCheckpoint, KeepLastPrunesOlderCheckpointsAndDebris) {
  for (int64_t s = 1; s <= 3; ++s) save(s * 100, 2);
  EXPECT_EQ(steps(), (std::vector<int64_t>{200, 300}));
  fs::create_directories(path("run/step_00000050.tmp"));  // debris from a crash
  fs::create_directories(path("run/notes"));              // not ours: left alone
  save(400, 2);
  save(500, 2);
  EXPECT_EQ(listing("run"), (std::vector<std::string>{"notes", "step_00000400", "step_00000500"}));
  save(600);  // keep_last = 0 keeps everything
  EXPECT_EQ(steps(), (std::vector<int64_t>{400, 500, 600}));
  prune_checkpoints(out(), 1);
  EXPECT_EQ(steps(), std::vector<int64_t>{600});
  EXPECT_EQ(load_checkpoint(*latest_checkpoint(out())).step, 600);
  expect_error([&] { prune_checkpoints(out(), 0); }, {"keep_last must be >= 1"});
}
