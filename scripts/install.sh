#!/usr/bin/env bash
# Install judgeopt with everything its tests and benchmarks use.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[dev,tpe]"
