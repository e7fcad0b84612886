#!/usr/bin/env bash
# Installs what mixtape needs from Debian's packages; does nothing when it is
# all there already. Used by `make train` and `make test`.
set -euo pipefail

packages=(cmake ninja-build g++ ccache pkg-config
          libeigen3-dev catch2 libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
          libboost-context-dev dataset-fashion-mnist
          python3-torch libopenblas0-pthread)  # PyTorch 1.13 CPU: the oracle of tests/parity

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
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
