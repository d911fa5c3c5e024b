#!/usr/bin/env bash
# Capture the OPT-125m sample workload on an NVIDIA GPU and keep the trace.
#
#   programs/profiler/gpu_capture.sh [OUT_DIR]
#
# Runs `cascade profile hf` on the OPT-125m shape with random weights (built from the
# config below: nothing is downloaded): the baseline (4 timed generations of 32 tokens
# from "Hello, my name is" after 1 warm-up, eager, fp16) and the timeline pass (the same
# generation under the PyTorch profiler with record_shapes and step ranges; Nsight
# Systems instead when TIMELINE_TOOL=nsys). Everything stays in OUT_DIR (default
# captures/opt125m-<gpu>-<date>); with CASCADE_APP (and CASCADE_API_TOKEN) set it is
# also streamed to that app. Needs a CUDA build of torch and transformers in the
# environment's python (`pip install torch transformers`), and `cascade` on PATH.
# Add the NVBit pass with CASCADE_NVBIT_TRACER=/path/to/tracer_tool.so MODE=both.
set -euo pipefail

command -v nvidia-smi >/dev/null || { echo "gpu_capture: nvidia-smi not found: run this on a machine with an NVIDIA GPU" >&2; exit 2; }
PY=${PYTHON:-python}
"$PY" - <<'PY' || { echo "gpu_capture: torch cannot see a CUDA GPU: install a CUDA build of torch (and transformers)" >&2; exit 2; }
import torch, transformers  # noqa: F401
assert torch.cuda.is_available()
PY

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
SLUG=$(echo "$GPU" | tr ' ' '-' | tr -cd 'A-Za-z0-9-' | tr 'A-Z' 'a-z')
OUT=${1:-captures/opt125m-${SLUG}-$(date -u +%Y%m%d)}
mkdir -p "$OUT/model"
cat > "$OUT/model/config.json" <<'JSON'
{"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 768, "num_hidden_layers": 12,
 "num_attention_heads": 12, "ffn_dim": 3072, "vocab_size": 50272, "max_position_embeddings": 2048,
 "word_embed_proj_dim": 768, "do_layer_norm_before": true, "activation_function": "relu",
 "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2, "enable_bias": true,
 "layer_norm_elementwise_affine": true, "torch_dtype": "float16"}
JSON
{
  echo "gpu: $GPU"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda); print("transformers", transformers.__version__)'
} > "$OUT/capture.txt"

APP_ARGS=()
if [[ -n "${CASCADE_APP:-}" ]]; then APP_ARGS=(--app "$CASCADE_APP"); fi
cascade profile "${APP_ARGS[@]}" --out "$OUT/trace" --name "opt125m-${SLUG}" \
  --source-gpu "$GPU" --mode "${MODE:-timeline}" --timeline-tool "${TIMELINE_TOOL:-torch}" \
  hf --model "$OUT/model/config.json" --random-init --prompt "Hello, my name is" \
  --max-new-tokens 32 --repeats 4 --warmup 1 --dtype fp16
echo "gpu_capture: trace kept in $OUT/trace (baseline.json, timeline.pt.trace.json); capture details in $OUT/capture.txt"
