// Datasets by name, beside the models' registry (models/registry.h): the one
// place a dataset's name is typed. The CLI's --dataset choices and help text,
// check-data's model for a dataset and the task each dataset trains read it.
//
//   fashion-mnist     image classification   Zalando's 28x28 clothing images (tools/data/dataset.h)
//   synthetic         image classification   generated prototypes plus noise
//   brown             language modelling     the bytes of the Brown corpus (tools/data/brown.h)
//   synthetic-tokens  language modelling     generated token windows (tools/data/text.h)
//   brown-genre       text classification    Brown passages labelled by genre
//
// Adding a dataset is one row in registry.cpp (and its loader).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/registry.h"

namespace mt::data {

struct DatasetInfo {
  std::string name;           // as --dataset spells it
  models::ModelTask task;     // what a model trained on it does
  std::string default_model;  // the model to read it with when none is named (on a CPU)
  std::string help;           // one line for --help
  // What `mixtape info` says of the dataset's files given --data: where they
  // are looked for and whether they are there. Null: info says nothing of it.
  std::string (*files_status)(const std::string& data_dir) = nullptr;
};

// Every dataset, in the order --help lists them.
const std::vector<DatasetInfo>& dataset_list();
std::vector<std::string> dataset_names();
// An mt::Error lists the known names when `name` is unknown.
const DatasetInfo& find_dataset(std::string_view name);
// The dataset a model of `task` trains on when none is named: the first row of that task.
const DatasetInfo& default_dataset(models::ModelTask task);

}  // namespace mt::data
