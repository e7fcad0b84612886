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
