#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install, lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ops/install.sh --test

.venv/bin/ruff check .
.venv/bin/ruff format --check .

# mypy cannot follow the folder -> vigil.* mapping of the editable install, so
# it reads the code through a tree of links shaped like the import package.
mkdir -p .typecheck/vigil
for part in engine platform web migrations; do ln -sfn "../../$part" ".typecheck/vigil/$part"; done
.venv/bin/mypy -p vigil.engine -p vigil.platform -p vigil.web

.venv/bin/python -m pytest -q "$@"
