#!/usr/bin/env bash
# One call on a lent GPU machine (no network, ten minutes a command): the CUDA check, then study runs
# sharing the GPU until the deadline; everything it keeps is packed into $OUT/gpu.tar.gz.
#
#   Here, once:  mkdir -p .gpu && cp PATH/tinyshakespeare.txt .gpu/ && git rev-parse HEAD > .gpu/commit
#                python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                  --platform manylinux_2_28_x86_64 -d .gpu/whl sentencepiece==0.2.3
#                echo /.gpu/ >> .git/info/exclude
#   There:       RUNS="astra_gamma:2 leviathan:4" DEADLINE=540 bash benchmarks/gpu_session.sh   (carry .gpu)
#   Here, after: python -m rnnlm.study collect --archives <files_at>/study && python -m rnnlm.study report
#
# RUNS: MODEL[:SEED] words for `gpu_check.py --study`; JOBS runs at once (default 5); DEADLINE seconds
# after which unfinished runs are stopped and what finished is packed (leave a minute for packing).
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
JOBS=${JOBS:-5}
RUNS=${RUNS:-}
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
say() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$R/logs/session.txt"; }
R=/tmp/gpu-session
mkdir -p "$R/study" "$R/logs"

# The pins the image lacks (its torch and Triton are its own: their CUDA wheels are too large to carry).
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export RNNLM_COMMIT="$(cat .gpu/commit 2>/dev/null || echo unknown)" PYTHONUNBUFFERED=1
CORPUS="$PWD/.gpu/tinyshakespeare.txt"
{ nvidia-smi; python3 -c "import torch, triton, sentencepiece; print(torch.__version__, triton.__version__, sentencepiece.__version__)"; } \
  > "$R/logs/environment.txt" 2>&1

# 1. The CUDA tests (bit-for-bit sharing among them) and the training-step table, the GPU alone.
python3 benchmarks/gpu_check.py --corpus "$CORPUS" --skip pipeline --out "$R/check-alone.md" > "$R/logs/check-alone.out" 2>&1
say "tests and speed done"

# 2. Study runs, JOBS at a time, one process each; MPS lets their kernels share the SMs.
STUDY=""
if [ -n "$RUNS" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p /tmp/mps /tmp/mps-log
  if nvidia-cuda-mps-control -d 2>>"$R/logs/mps.txt" \
      && timeout 60 python3 -c "import torch; print((torch.ones(2, device='cuda') + 1).sum().item())" >>"$R/logs/mps.txt" 2>&1; then
    say "MPS on"
  else
    echo quit | nvidia-cuda-mps-control 2>/dev/null
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    say "MPS off: the runs take turns on the GPU"
  fi
  # shellcheck disable=SC2086  # RUNS is a list of words
  python3 benchmarks/gpu_check.py --corpus "$CORPUS" --study $RUNS --jobs "$JOBS" --results "$R/study" \
    --log "$R/logs/study.log" > "$R/logs/study.out" 2>&1 &
  STUDY=$!
fi

# 3. Beside them: astra_alpha through the stage scripts on CUDA, against the CPU's committed run.
python3 benchmarks/gpu_check.py --corpus "$CORPUS" --skip tests speed --out "$R/check-pipeline.md" \
  > "$R/logs/check-pipeline.out" 2>&1
say "pipeline check done"

if [ -n "$STUDY" ]; then
  while kill -0 "$STUDY" 2>/dev/null && [ "$(left)" -gt 0 ]; do sleep 5; done
  if kill -0 "$STUDY" 2>/dev/null; then
    say "deadline: stopping the unfinished runs (their scratch copies stay in /tmp while the machine is warm)"
    kill "$STUDY"
  fi
  echo quit | nvidia-cuda-mps-control 2>/dev/null
fi
say "packing"
tar czf "$OUT/gpu.tar.gz" -C "$R" .
cat "$R/logs/session.txt" "$R/logs/study.out" 2>/dev/null
ls -la "$R/study"
