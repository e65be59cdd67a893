#!/usr/bin/env bash
# The GPU check on a lent GPU machine (the workplace's `device` tool), which has torch with CUDA but
# no network and no specd install. Run from the checkout's root there:
#
#   bash bench/gpu_lease.sh [gpu_check.py's options]
#
# It needs, carried in .whl/ (ignored by git), the wheels the machine's image lacks, for its
# Python 3.12: bitsandbytes, gguf, platformdirs. Here, in the checkout's root:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 -d .whl \
#       bitsandbytes==0.50.2 gguf platformdirs
#
# specd runs from the checkout (no build: the CUDA paths need none of specd's C kernels): the
# package's layout (models/ and lsp/ installed as specd.models, specd.lsp) is made with two links.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
ln -sfn ../models specd/models
ln -sfn ../lsp specd/lsp
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
lscpu | grep -m1 "Model name"
python3 -c "import torch, bitsandbytes; print('torch', torch.__version__, 'bitsandbytes', bitsandbytes.__version__, 'capability', torch.cuda.get_device_capability())"
python3 bench/gpu_check.py "$@" 2>&1 | tee "${OUT:-/tmp}/gpu_check.log"
status=${PIPESTATUS[0]}
rm -f specd/models specd/lsp
exit "$status"
