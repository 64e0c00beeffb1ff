#!/usr/bin/env bash
# GPU acceptance (shared/gpu-acceptance.md), in one run on a GPU machine; outputs under $OUT/acc, packed into
# $OUT/acceptance.tar.gz.
#
#     OUT=/tmp/acc bash benchmarks/gpu_acceptance.sh [STEP ...]     # steps: tests gpt2 reference fixtures fidelity hooks convnet
#
# Each step has its own time limit and log; a step that fails or times out does not stop the others.
# Wheels in .whl/ (plotly, for the HTML report) are installed first when present.
set -u
OUT=${OUT:-/tmp/perfscope-acceptance}
R="$OUT/acc"
mkdir -p "$R"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi; $PY -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"; } >"$R/env.txt" 2>&1

step() {  # step NAME LIMIT_S COMMAND...
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$R/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc, $((SECONDS - t0)) s (limit $limit s): $*" | tee -a "$R/summary.txt"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(gpt2 fixtures reference)
for s in "${steps[@]}"; do
    case "$s" in
        tests) step tests 300 $PY -m pytest -q -x -m "not browser" -p no:cacheprovider ;;
        gpt2) step gpt2 300 $PY -m perfscope analyze examples/gpt2_small.py --device cuda --out "$R/gpt2" --budget 210 ;;
        reference) step reference 150 $PY benchmarks/gpu_reference.py --json "$R/reference.json" ;;
        fixtures) step fixtures 150 $PY benchmarks/capture_cuda_fixtures.py --out "$R/fixtures" ;;
        fidelity) step fidelity 200 $PY benchmarks/fidelity.py --example examples/gpt2_small.py --device cuda --rounds 3 ;;
        hooks) step hooks 150 $PY benchmarks/hook_overhead.py --device cuda ;;
        convnet) step convnet 200 $PY -m perfscope analyze examples/small_convnet.py --device cuda --out "$R/convnet" --budget 150 ;;
        *) echo "unknown step $s" | tee -a "$R/summary.txt" ;;
    esac
done
# Traces of the big runs stay behind (MBs each); results, reports, logs and the small fixtures come back.
find "$R" -path '*/trials/*/trace/*' -name 'rank*.json.gz' -size +2M -delete  # trace/rank<R>.json.gz (trace/export.py)
tar czf "$OUT/acceptance.tar.gz" -C "$OUT" acc
ls -la "$OUT"
cat "$R/summary.txt"
