// `mixtape tokenize`: what a language model sees. Reads text on standard
// input and prints its token ids (one line, separated by spaces); with
// --decode reads ids (separated by whitespace) and writes their text.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>

#include "tools/cli/options.h"
#include "tools/cli/subcommands.h"
#include "tools/data/bpe.h"

namespace mt::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer = "gpt2";
  bool decode = false;
};

// Whitespace-separated decimal ids; anything else is an error naming it.
std::vector<int64_t> read_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MT_CHECK(used == word.size() && !word.empty(), "tokenize --decode: '{}' is not a token id", word);
    ids.push_back(id);
  }
  return ids;
}

int run_tokenize(const TokenizeOptions& o) {
  const std::unique_ptr<data::Tokenizer> tokenizer = data::make_tokenizer(o.tokenizer);
  const std::string input((std::istreambuf_iterator<char>(std::cin)), {});
  if (o.decode) {
    const std::string text = tokenizer->decode(read_ids(input));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  const std::vector<int64_t> ids = tokenizer->encode(input);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace

Subcommand add_tokenize(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of the text on standard input (--decode: the text of the ids)");
  add_tokenizer_option(cmd, options->tokenizer, "gpt2 (GPT-2's byte-level BPE, 50257 tokens) or bytes");
  cmd->add_flag("--decode", options->decode, "read token ids and write their text");
  return {cmd, [options](const std::string&) { return run_tokenize(*options); }};
}

}  // namespace mt::cli
