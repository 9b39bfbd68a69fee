nvidia-smi -L
if ! nvidia-smi -L | grep -q H200; then
  for s in 64 128 32 64 128 32; do KILN_DECODE_SPLITS=$s .carry/bin/kiln bench --model dummy:llama3-8b --device cuda --quantize fp8 --prefill none --decode 128 --depth 8192,32768 --concurrency 1 --repeats 2 --json $OUT/splits-$s-$RANDOM.json 2>&1 | grep "^| decode" | sed "s/^/splits=$s /"; done
  exit 3
fi
mkdir -p /tmp/proof; xz -dk .anchor/ggml-vocab-llama-bpe.gguf.xz
(PREP_JOBS=16 setsid scripts/gpu-prepare.sh llama llama3 q8 > /tmp/proof/prep.log 2>&1 < /dev/null &)
if WAIT_S=285 scripts/gpu-wait.sh llama llama3 q8; then
  cat /tmp/kiln-bench/prepare.log
  P=/tmp/proof; OUT=$P WAIT_S=5 timeout 295 scripts/decode-proof-gpu.sh > $P/proof.log 2>&1; echo proof rc=$?; tail -30 $P/proof.log; tar czf $OUT/proof.tgz -C $P .
else
  WAIT_S=290 scripts/gpu-wait.sh llama llama3 q8; echo wait2 rc=$?; cat /tmp/kiln-bench/prepare.log
fi
