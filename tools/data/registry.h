// Datasets by name, beside the models' registry (models/registry.h): the one
// place a dataset's name is typed. The CLI's --dataset choices and help text,
// check-data's model for a dataset, the task each dataset trains, the
// trainer's default dataset per task and its loader (tools/train's
// load_data is a lookup here) read it.
//
//   fashion-mnist     image classification   Zalando's 28x28 clothing images (tools/data/dataset.h)
//   synthetic         image classification   generated prototypes plus noise
//   brown             language modelling     the bytes of the Brown corpus (tools/data/brown.h)
//   synthetic-tokens  language modelling     generated token windows (tools/data/text.h)
//   brown-genre       text classification    Brown passages labelled by genre
//
// Adding a dataset is one row in registry.cpp (and its loader).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/registry.h"
#include "tools/data/dataset.h"

namespace mt::data {

// What a dataset's loader is asked for: where its files are, the model
// that will read it, and how much of it.
struct DataRequest {
  std::string dir;          // --data: the dataset's directory ("" = its default place)
  models::ModelInfo model;  // the model that reads it (text: its vocabulary)
  int64_t window = 0;       // text: tokens per window or passage
  int64_t train_limit = 0;  // at most this many training samples (0 = all; never more than the set holds,
                            // generated sets: 4096 images, 2048 token windows)
  int64_t test_limit = 0;   // the same for the held-out split (generated: 1024 images, 256 windows)
  LabelCheck labels = LabelCheck::Refuse;
  std::string tokenizer = "bytes";  // text read as tokens: bytes or gpt2 (tools/data/bpe.h; brown only)
};

// A dataset's two splits: test is the held-out one (Brown's validation documents for text).
struct Splits {
  TensorDataset train, test;
};

struct DatasetInfo {
  std::string name;           // as --dataset spells it
  models::ModelTask task;     // what a model trained on it does
  std::string default_model;  // the model to read it with when none is named (on a CPU)
  std::string help;           // one line for --help
  // What `mixtape info` says of the dataset's files given --data: where they
  // are looked for and whether they are there. Null: info says nothing of it.
  std::string (*files_status)(const std::string& data_dir) = nullptr;
  // Reads (or generates) the training and held-out splits; mt::Error when
  // the files are missing or do not fit the request's model.
  Splits (*load)(const DataRequest& request) = nullptr;
};

// Every dataset, in the order --help lists them.
const std::vector<DatasetInfo>& dataset_list();
std::vector<std::string> dataset_names();
// An mt::Error lists the known names when `name` is unknown.
const DatasetInfo& find_dataset(std::string_view name);
// The dataset a model of `task` trains on when none is named: the first row of that task.
const DatasetInfo& default_dataset(models::ModelTask task);

}  // namespace mt::data
