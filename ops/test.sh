#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install, lint, type-check, test.
#   bash ops/test.sh           everything (what CI runs)
#   bash ops/test.sh --fast    the unit tests that start no server, no PostgreSQL, no
#                              browser and no bundled model, in two processes (about
#                              1.5 minutes on 2 cores), after the same install and lint;
#                              the 20 slowest are listed (30 for the whole suite, which
#                              runs in one process: its load tests measure the machine)
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
if [[ "${1:-}" == "--fast" ]]; then
  FAST=1
  shift
fi
bash ops/install.sh --test

.venv/bin/ruff check .
.venv/bin/ruff format --check .

# mypy cannot follow the folder -> vigil.* mapping of the editable install, so
# it reads the code through a tree of links shaped like the import package.
mkdir -p .typecheck/vigil
for part in engine platform web migrations; do ln -sfn "../../$part" ".typecheck/vigil/$part"; done
.venv/bin/mypy -p vigil.engine -p vigil.platform -p vigil.web

if [[ $FAST == 1 ]]; then
  .venv/bin/python -m pytest -q -n 2 tests/unit -m "not slow and not browser and not postgres" \
    --durations=20 "$@"
else
  .venv/bin/python -m pytest -q --durations=30 "$@"
fi
