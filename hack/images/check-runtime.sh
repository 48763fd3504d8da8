#!/bin/sh
# Runs inside the runtime image, as its user (hack/images.sh check runtime): the commands a
# pod runs work, torch and Triton import, and the server speaks on the CPU.
set -eu
ttsfleet-runtime --help >/dev/null
# The operator's pods run `ttsfleet serve`: in this image that is the runtime's CLI.
ttsfleet serve --help >/dev/null
python -c 'import torch, triton, ttsfleet_runtime; print("torch", torch.__version__, "CUDA", torch.version.cuda, "triton", triton.__version__)'
# Triton compiles its launchers with it on a GPU.
gcc --version | head -n 1
work=$(mktemp -d)
ttsfleet-runtime checkpoint --random --size tiny --variant CustomVoice --out "$work/tiny" >/dev/null
echo sk-check >"$work/keys"
port=${CHECK_PORT:-18475}
ttsfleet serve --model "$work/tiny" --device cpu --host 127.0.0.1 --port "$port" \
  --api-keys-file "$work/keys" --max-audio-seconds 2 >"$work/serve.log" 2>&1 &
server=$!
status=0
python - "$port" <<'PY' || status=$?
import json
import sys
import time
import urllib.request

url = f"http://127.0.0.1:{sys.argv[1]}"
deadline = time.monotonic() + 240
while True:
    try:
        urllib.request.urlopen(f"{url}/health/ready", timeout=5)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the server was not ready in 240 s")
        time.sleep(1)
body = {"model": "tiny", "input": "Hello!", "voice": "vivian", "response_format": "wav", "stream_format": "file"}
request = urllib.request.Request(
    f"{url}/v1/audio/speech",
    data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer sk-check", "Content-Type": "application/json"},
)
wav = urllib.request.urlopen(request, timeout=120).read()
assert wav[:4] == b"RIFF" and len(wav) > 44, wav[:64]
print(f"speech on the CPU: {len(wav)} bytes of WAV")
PY
kill "$server" 2>/dev/null || true
wait "$server" 2>/dev/null || true
if [ "$status" -ne 0 ]; then
  tail -n 30 "$work/serve.log" >&2
fi
rm -rf "$work"
exit "$status"
