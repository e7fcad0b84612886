// The dataset registry (tools/data/registry.h): its names, its lookups, and
// that each row's default model exists and does the dataset's task.
#include <catch2/catch.hpp>

#include "runtime/error.h"
#include "tools/data/registry.h"

using namespace mt;

TEST_CASE("dataset registry: the names in --help's order", "[data][registry]") {
  CHECK(data::dataset_names() ==
        std::vector<std::string>{"fashion-mnist", "synthetic", "brown", "synthetic-tokens", "brown-genre"});
}

TEST_CASE("dataset registry: each default model exists and does the dataset's task", "[data][registry]") {
  for (const data::DatasetInfo& d : data::dataset_list()) {
    INFO(d.name);
    CHECK(&data::find_dataset(d.name) == &d);
    CHECK(models::model_info(d.default_model).task == d.task);
    CHECK_FALSE(d.help.empty());
  }
}

TEST_CASE("dataset registry: an unknown name lists the known ones", "[data][registry]") {
  CHECK_THROWS_WITH(data::find_dataset("mnist"),
                    "unknown dataset 'mnist': expected fashion-mnist, synthetic, brown, synthetic-tokens or "
                    "brown-genre");
}

TEST_CASE("dataset registry: the default dataset of each task", "[data][registry]") {
  CHECK(data::default_dataset(models::ModelTask::ImageClassification).name == "fashion-mnist");
  CHECK(data::default_dataset(models::ModelTask::LanguageModel).name == "brown");
  CHECK(data::default_dataset(models::ModelTask::TextClassification).name == "brown-genre");
}

// Bug caught: --train-limit 100000000 on a generated set made that many
// samples (15 GB and climbing) instead of limiting: a limit above a set's
// size must leave the set as it is, and one below it still cuts it.
TEST_CASE("a limit above a generated set's size never grows the set", "[data][registry]") {
  const data::DatasetInfo& images = data::find_dataset("synthetic");
  const data::Splits whole = images.load({.model = models::model_info("mlp")});
  CHECK(whole.train.size() == 4096);
  CHECK(whole.test.size() == 1024);
  const data::Splits above = images.load({.model = models::model_info("mlp"), .train_limit = 5000, .test_limit = 2000});
  CHECK(above.train.size() == whole.train.size());
  CHECK(above.test.size() == whole.test.size());
  const data::Splits below = images.load({.model = models::model_info("mlp"), .train_limit = 100, .test_limit = 10});
  CHECK(below.train.size() == 100);
  CHECK(below.test.size() == 10);

  const data::DatasetInfo& tokens = data::find_dataset("synthetic-tokens");
  const data::DataRequest text{.model = models::model_info("gpt-tiny"), .window = 16};
  data::DataRequest above_text = text;
  above_text.train_limit = 3000;
  above_text.test_limit = 300;
  const data::Splits windows = tokens.load(above_text);
  CHECK(windows.train.size() == tokens.load(text).train.size());
  CHECK(windows.train.size() == 2048);
  CHECK(windows.test.size() == 256);
}
