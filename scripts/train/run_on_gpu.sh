#!/usr/bin/env bash
# Train, export and check kiln's shipped models in one call on the GPU machine.
#
#   OUT=/path/to/output bash scripts/train/run_on_gpu.sh [extra train.py flags]
#
# Needs the carried, ignored folder .train/ (made here by prepare.py and `pip download`; kept out
# of .carry/, which scripts/build-gpu-carry.sh clears):
#   .train/data/   tokenizer.json, train.u16.xz, val.u16.xz, meta.json, sources.json
#   .train/whl/    the gguf wheel (pure Python; the GPU machine does not have the package)
# Everything lands in $OUT; copy $OUT/* into models/ afterwards. Sized for about 6 minutes of wall
# time on one H200 (220 s target + 80 s draft, compilation included, plus start-up and export).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output folder}"
DATA=${DATA:-.train/data}

for f in tokenizer.json train.u16.xz val.u16.xz meta.json sources.json; do
  [ -f "$DATA/$f" ] || { echo "missing $DATA/$f: run scripts/train/prepare.py and carry .train" >&2; exit 1; }
done
shopt -s nullglob
wheels=(.train/whl/gguf-*.whl)
if ! python3 -c "import gguf" 2>/dev/null; then
  [ ${#wheels[@]} -gt 0 ] || { echo "no gguf wheel under .train/whl" >&2; exit 1; }
  SITE=/tmp/kiln-train-site
  if python3 -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}"; then
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  else
    # A pure-Python wheel is a zip that Python imports as is.
    export PYTHONPATH="$PWD/${wheels[0]}${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
python3 -c "import torch, transformers, gguf, tokenizers, safetensors, matplotlib; \
print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

mkdir -p "$OUT"
python3 scripts/train/train.py --data "$DATA" --out "$OUT" "$@" 2>&1 | tee "$OUT/train.log"
du -ab "$OUT" | sort -n | tail -20
