#!/usr/bin/env bash
# Install the Debian/Ubuntu packages Zephon needs, only those missing.
#   tools/deps.sh            build + test dependencies
#   tools/deps.sh --slurm    also Slurm and munge (for the Slurm integration test)
# The Python package (python/) needs python3-dev, numpy; its tests and
# benchmarks torch, mpi4py, h5py and regex (the pure-Python BPE reference).
# sentencepiece: spm_train, which the SentencePiece parity test trains models with.
# The loopback test servers (tests/net) need nginx, openssl, curl, Node.js and npm;
# Node.js may come from elsewhere than apt (with its own npm): then it is kept.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libomp-dev
      libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
      libzstd-dev zstd libcurl4-openssl-dev libexpat1-dev libcmocka-dev
      libjansson-dev libsimdjson-dev libxxhash-dev libpcre2-dev libutf8proc-dev python3
      libthrift-dev libboost-dev libsnappy-dev zlib1g-dev libdeflate-dev libisal-dev
      python3-dev python3-venv python3-pip python3-setuptools python3-numpy
      python3-torch python3-mpi4py python3-h5py python3-regex
      sentencepiece
      nginx openssl curl ca-certificates
      time)  # /usr/bin/time: peak RSS in test_cli_segments_rss
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
if [[ "${1:-}" == "--slurm" ]]; then
  pkgs+=(slurm-wlm munge)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Headless Chromium for the HTML report's browser test (tests/mpi/test_report_browser.sh);
# when it cannot be installed that test is skipped, saying so.
if ! command -v chromium >/dev/null 2>&1; then
  echo "deps: installing chromium"
  SUDO=""; if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; } ||
    echo "deps: chromium could not be installed: the HTML report's browser test will be skipped" >&2
fi
# libFuzzer (fuzz/run.sh) is part of clang's runtime: Debian 12 ships it in
# libclang-rt-14-dev, which clang only recommends.
if command -v clang >/dev/null &&
   ! ls "$(clang -print-resource-dir)"/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
  echo "deps: installing libclang-rt-dev (libFuzzer)"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libclang-rt-dev >/dev/null
fi
