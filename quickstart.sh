#!/usr/bin/env bash
# Renders the default project next to this template's folder (or into <folder>), installs it with
# CPU torch into the project's own .venv, trains it on the bundled digits and prints where the
# results are. Nothing is written inside the template's checkout.
# Elsewhere than a machine with the CPU wheel on disk, set TORCH_INDEX_URL, e.g.
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu ./quickstart.sh
set -euo pipefail
template=$(cd "$(dirname "$0")" && pwd)
workdir=${1:-$(dirname "$template")}
project="$(mkdir -p "$workdir" && cd "$workdir" && pwd)/digit-classifier"
if [ -e "$project" ]; then
  echo "error: $project already exists; remove it or pass another folder: ./quickstart.sh <folder>" >&2
  exit 1
fi

# The environment goes into the project folder before the project does: cookiecutter, which
# renders it, runs from there (-f: it renders into that folder, which holds only .venv).
mkdir "$project"
python3 -m venv "$project/.venv"
. "$project/.venv/bin/activate"
pip install -q --upgrade pip
pip install -q "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
pip install -q "cookiecutter>=2.6"
cookiecutter --no-input -f "$template" -o "$(dirname "$project")"

cd "$project"
pip install -q -e ".[dev]"
python train.py
run=$(ls -d logs/train/runs/* | tail -n 1)
echo
echo "The project and its virtual environment (.venv): $project"
echo "Results of this run: $project/$run"
python - "$run/metrics.json" <<'PY'
import json, sys
metrics = json.load(open(sys.argv[1]))
print(f"  test/acc {metrics['test/acc']:.4f}, val/acc_best {metrics['val/acc_best']:.4f} (metrics.json)")
PY
echo "  checkpoints: $project/$run/checkpoints/best.ckpt, last.ckpt"
echo "Activate the environment with: source $project/.venv/bin/activate"
