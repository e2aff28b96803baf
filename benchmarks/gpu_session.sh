#!/usr/bin/env bash
# One call on a lent GPU machine (no network, ten minutes a command): the CUDA check, then study runs
# sharing the GPU until the deadline; everything it keeps is packed into $OUT/gpu.tar.gz.
#
#   Here, before: bash benchmarks/gpu_prepare.sh PATH/tinyshakespeare.txt   (.gpu/: corpus, commit, wheels,
#                 the CPU's tokenizer sha256)
#                 and a dry run on the CPU (DRY_RUN below)
#   There:        RUNS="leviathan:5 leviathan:6" DEADLINE=500 bash benchmarks/gpu_session.sh   (carry .gpu)
#   Here, after:  tar xzf <files_at>/gpu.tar.gz -C out && python -m rnnlm_study collect --archives out/study
#                 && python -m rnnlm_study report
# Size a call from docs/study-runs.md's solo seconds: MPS gave about 1.6x the throughput of one run at a
# time, so a 400 s window holds about 640 solo seconds of training and evaluation.
#
# RUNS: MODEL[:SEED] words for `gpu_check.py --study`; JOBS runs at once (default 5); DEADLINE seconds
# after which unfinished runs are stopped and what finished is packed (leave a minute for packing).
# ALONE: the check's parts run first with the GPU to themselves (default: tests speed); BESIDE: the
# parts run beside the study runs, which check results, not speed (default: pipeline).
# EVALUATE: models whose evaluate stage is timed part by part at full scale, the GPU alone, after the
# ALONE parts (`stage_times.py --full-evaluation`: each trained one step; default: none).
# SEED_STREAMS=1: `seed_streams.py --mps` (several seeds in one process against processes under MPS),
# the GPU alone, after EVALUATE (default: 0).
# STEPS_SCALE: train.steps_scale of the runs and the pipeline check (default: params.yaml's).
# DRY_RUN=1: the same steps on a machine without a GPU (the CUDA tests skip themselves; no speed
# table), to find a broken step here rather than in the lent minutes:
#   OUT=/tmp/dry DRY_RUN=1 STEPS_SCALE=0.01 ALONE=tests BESIDE=pipeline RUNS=astra_alpha_carried:5 \
#     bash benchmarks/gpu_session.sh
set -u
T0=$(date +%s)
: "${OUT:?set OUT, the folder gpu.tar.gz goes to (the device sets it)}"
mkdir -p "$OUT"  # a dry run's OUT may not exist yet: every pack would fail, without a word
DEADLINE=${DEADLINE:-540}
JOBS=${JOBS:-5}
RUNS=${RUNS:-}
ALONE=${ALONE-tests speed}
BESIDE=${BESIDE-pipeline}
EXTRA=()
[ -n "${STEPS_SCALE:-}" ] && EXTRA+=(--steps-scale "$STEPS_SCALE")
[ "${DRY_RUN:-0}" = 1 ] && EXTRA+=(--dry-run)
# the CPU's tokenizer (gpu_prepare.sh): a SentencePiece run trains only on the same one
TOKENIZER=()
[ -s .gpu/tokenizer.sha256 ] && TOKENIZER=(--tokenizer-sha256 "$(cat .gpu/tokenizer.sha256)")
# the check's parts other than those named: gpu_check.py's --skip words
others() { for part in tests speed pipeline; do case " $* " in *" $part "*) ;; *) printf '%s ' "$part";; esac; done; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
say() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$R/logs/session.txt"; }
R=$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX")  # what is kept, before packing
mkdir -p "$R/study" "$R/logs"
JOBS_RUNNING=()
# What is kept goes to $OUT/gpu.tar.gz (written beside, then renamed) every half minute while the
# jobs run, and once more at the end: a call killed at its limit still brings back what finished.
pack() { tar czf "$OUT/gpu.tar.gz.partial" -C "$R" . 2>/dev/null && mv "$OUT/gpu.tar.gz.partial" "$OUT/gpu.tar.gz"; }
running() { for pid in "${JOBS_RUNNING[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
stop() { for pid in "${JOBS_RUNNING[@]}"; do kill -- -"$pid" 2>/dev/null; done; }
trap 'say "stopped from outside"; stop; pack; exit 124' TERM INT

# The pins the image lacks (its torch and Triton are its own: their CUDA wheels are too large to carry).
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
# this checkout's library, whatever else is installed; `python3 -m benchmarks.NAME` finds the benchmarks from here
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export RNNLM_COMMIT="$(cat .gpu/commit 2>/dev/null || echo unknown)" PYTHONUNBUFFERED=1
CORPUS="$PWD/.gpu/tinyshakespeare.txt"
{ nvidia-smi; python3 -c "import torch, triton, sentencepiece; print(torch.__version__, triton.__version__, sentencepiece.__version__)"; } \
  > "$R/logs/environment.txt" 2>&1

# 1. The parts that want the GPU alone (the training-step table; the tests, unless BESIDE names them).
if [ -n "$ALONE" ]; then
  # shellcheck disable=SC2046  # others prints words
  timeout "$(( $(left) > 1 ? $(left) : 1 ))" python3 -m benchmarks.gpu_check --corpus "$CORPUS" --skip $(others $ALONE) "${EXTRA[@]}" \
    --out "$R/check-alone.md" > "$R/logs/check-alone.out" 2>&1
  say "$ALONE done (exit $?)"
  pack
fi

# 1b. The evaluate stage's parts at full scale, the GPU alone (what #67 asks of a Leviathan's evaluation).
if [ -n "${EVALUATE:-}" ]; then
  # shellcheck disable=SC2086  # EVALUATE is a list of words
  timeout "$(( $(left) > 1 ? $(left) : 1 ))" python3 -m benchmarks.stage_times --corpus "$CORPUS" --full-evaluation \
    --models $EVALUATE --markdown "$R/evaluate-full.md" --json "$R/evaluate-full.json" --log "$R/logs/evaluate-full.log" \
    > "$R/logs/evaluate-full.out" 2>&1
  say "evaluate timed for $EVALUATE (exit $?)"
  pack
fi

# 1c. Several seeds in one process, the GPU alone (its own MPS daemon, quit before the runs start theirs).
if [ "${SEED_STREAMS:-0}" = 1 ]; then
  # a dry run: tiny shapes, no MPS
  SEED_ARGS=(--mps); [ "${DRY_RUN:-0}" = 1 ] && SEED_ARGS=(--quick)
  timeout "$(( $(left) > 1 ? $(left) : 1 ))" python3 -m benchmarks.seed_streams "${SEED_ARGS[@]}" \
    --markdown "$R/seed-streams.md" --json "$R/seed-streams.json" > "$R/logs/seed-streams.out" 2>&1
  say "seed streams timed (exit $?)"
  pack
fi

# 2. Study runs, JOBS at a time, one process each; MPS lets their kernels share the SMs. Each
# background job gets a process group of its own (setsid), so that the deadline stops its stage
# processes too: MPS's quit waits for every client, and a stage left running kept it waiting past
# the call's limit once (2026-11-26), with nothing packed.
MPS=0
if [ -n "$RUNS" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p /tmp/mps /tmp/mps-log
  if nvidia-cuda-mps-control -d 2>>"$R/logs/mps.txt" \
      && timeout 60 python3 -c "import torch; print((torch.ones(2, device='cuda') + 1).sum().item())" >>"$R/logs/mps.txt" 2>&1; then
    MPS=1
    say "MPS on"
  else
    echo quit | timeout 10 nvidia-cuda-mps-control 2>/dev/null
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    say "MPS off: the runs take turns on the GPU"
  fi
  # shellcheck disable=SC2086  # RUNS is a list of words
  setsid python3 -m benchmarks.gpu_check --corpus "$CORPUS" --study $RUNS --jobs "$JOBS" --results "$R/study" "${EXTRA[@]}" "${TOKENIZER[@]}" \
    --log "$R/logs/study.log" > "$R/logs/study.out" 2>&1 &
  JOBS_RUNNING+=($!)
fi

# 3. Beside them: astra_alpha through the stage scripts on CUDA against the CPU's committed run
# (and whatever else BESIDE names).
if [ -n "$BESIDE" ]; then
  # shellcheck disable=SC2046
  setsid python3 -m benchmarks.gpu_check --corpus "$CORPUS" --skip $(others $BESIDE) "${EXTRA[@]}" \
    --out "$R/check-beside.md" > "$R/logs/check-beside.out" 2>&1 &
  JOBS_RUNNING+=($!)
fi

SINCE=0
while [ ${#JOBS_RUNNING[@]} -gt 0 ] && running && [ "$(left)" -gt 0 ]; do
  sleep 1
  SINCE=$((SINCE + 1))
  if [ "$SINCE" -ge 30 ]; then pack; SINCE=0; fi
done
if [ ${#JOBS_RUNNING[@]} -gt 0 ] && running; then
  say "deadline: stopping the unfinished jobs and their stages"
  stop
fi
say "packing"
pack
[ "$MPS" = 1 ] && { echo quit | timeout 20 nvidia-cuda-mps-control 2>/dev/null || say "MPS did not quit in 20 s"; }
cat "$R/logs/session.txt" "$R/logs/study.out" "$R/evaluate-full.md" "$R/seed-streams.md" "$R/check-beside.md" 2>/dev/null
ls -la "$R/study"
