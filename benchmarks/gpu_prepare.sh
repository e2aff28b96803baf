#!/usr/bin/env bash
# Everything benchmarks/gpu_session.sh carries to a lent GPU machine, made and checked in one command
# before the call (the lent minutes are too few to find a missing piece there):
#
#   bash benchmarks/gpu_prepare.sh PATH/tinyshakespeare.txt
#
# It refuses a working tree with uncommitted changes to tracked files (the runs' provenance names the
# commit, which must be what runs), a corpus whose sha256 is not params.yaml's, and a .gpu/ folder
# it cannot fill. Then .gpu/ holds the corpus, the commit, the wheels of the pins the machine's
# image lacks (sentencepiece at requirements.txt's version, for its Python 3.12) and tokenizer.sha256,
# the SentencePiece model the data stages train here (a SentencePiece run there trains only on the
# same), and is ignored by git; it prints what travels and the variables of the call.
set -euo pipefail
CORPUS=${1:?usage: bash benchmarks/gpu_prepare.sh PATH/tinyshakespeare.txt}
cd "$(git rev-parse --show-toplevel)"
fail() { echo "error: $*" >&2; exit 1; }

git diff --quiet HEAD -- || fail "uncommitted changes to tracked files; expected a committed tree (the runs record its commit)"
[ -f "$CORPUS" ] || fail "$CORPUS: no such file; expected a local copy of Tiny Shakespeare"
pinned=$(sed -n 's/^  sha256: *\([0-9a-f]\{64\}\) *$/\1/p' params.yaml | head -1)
actual=$(sha256sum "$CORPUS" | cut -d' ' -f1)
[ "$actual" = "$pinned" ] || fail "$CORPUS: sha256 $actual; expected params.yaml's $pinned"
spm=$(sed -n 's/^sentencepiece==//p' requirements.txt)
[ -n "$spm" ] || fail "requirements.txt pins no sentencepiece version"

grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
rm -rf .gpu.partial && mkdir -p .gpu.partial/whl
cp "$CORPUS" .gpu.partial/tinyshakespeare.txt
git rev-parse HEAD > .gpu.partial/commit
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .gpu.partial/whl "sentencepiece==$spm" \
  || fail "could not download sentencepiece==$spm for Python 3.12 (manylinux x86-64); expected the package registry"
log=$(mktemp "${TMPDIR:-/tmp}/gpu-prepare-tokenizer.XXXXXX")
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" python3 -m benchmarks.pipeline_runs tokenizer-sha256 "$CORPUS" > .gpu.partial/tokenizer.sha256 2> "$log" \
  || { rm -rf .gpu.partial; fail "the data stages failed here ($(tail -1 "$log")); expected them to train the tokenizer"; }
rm -f "$log"
rm -rf .gpu && mv .gpu.partial .gpu  # whole, or the old one left as it was

echo "ready: .gpu/ ($(du -sh .gpu | cut -f1)) for commit $(cut -c1-12 .gpu/commit): $(ls .gpu/whl), tokenizer $(cut -c1-12 .gpu/tokenizer.sha256)"
echo "call the device's run with carry [\".gpu\"] and, e.g.:"
echo "  RUNS=\"leviathan:5 leviathan:6\" JOBS=5 ALONE=tests BESIDE=pipeline DEADLINE=500 bash benchmarks/gpu_session.sh"
