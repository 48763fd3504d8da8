// The playground: stream speech from this server and play it as it arrives.
// It asks /v1/audio/speech/with-timestamps for JSON lines: each a chunk of raw
// s16le PCM (response_format "pcm") in base64, scheduled right after the previous
// one in WebAudio, and the words timed with it, shown as a caption whose word is
// highlighted while it is being spoken (the engine's word times).
// A Base model speaks cloned voices: the page uploads one (POST /v1/audio/voices,
// with the speaker's consent) and selects it as the voice.
"use strict";

const $ = (id) => document.getElementById(id);
const keyInput = $("api-key");
let modelId = null;
let controller = null;

keyInput.value = localStorage.getItem("ttsfleet-api-key") || "";
keyInput.addEventListener("change", () => {
  localStorage.setItem("ttsfleet-api-key", keyInput.value.trim());
  load();
});

function authHeaders() {
  const key = keyInput.value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

function setStatus(text, state) {
  const status = $("status");
  status.textContent = text;
  status.dataset.state = state;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || response.statusText;
  } catch (_) {
    return response.statusText;
  }
}

async function load(selected) {
  const models = await fetch("/v1/models", { headers: authHeaders() });
  if (!models.ok) {
    $("model").textContent = models.status === 401 ? "enter an API key" : await errorMessage(models);
    return;
  }
  const model = (await models.json()).data[0];
  modelId = model.id;
  $("model").textContent = `${model.id} · ${model.variant} · ${model.sample_rate} Hz`;
  const voices = await fetch("/v1/audio/voices", { headers: authHeaders() });
  const select = $("voice");
  select.replaceChildren();
  if (!model.speakers.length && !model.supports_voice_clone) {
    select.append(new Option("(described by the instructions)", ""));
  }
  if (voices.ok) {
    for (const voice of (await voices.json()).data) {
      select.append(new Option(voice.type === "uploaded" ? `${voice.name} (uploaded)` : voice.name, voice.id));
    }
  }
  if (selected) select.value = selected;
  $("clone").hidden = !model.supports_voice_clone;
  setStatus("ready", "ready");
}

async function uploadVoice() {
  const file = $("clone-audio").files[0];
  const status = $("clone-status");
  if (!file) { status.textContent = "choose a recording first"; return; }
  const form = new FormData();
  form.append("audio", file);
  form.append("transcript", $("clone-transcript").value);
  form.append("consent", $("clone-consent").checked ? "true" : "false");
  form.append("name", file.name);
  $("upload").disabled = true;
  status.textContent = "uploading and cloning…";
  try {
    const response = await fetch("/v1/audio/voices", { method: "POST", headers: authHeaders(), body: form });
    if (!response.ok) throw new Error(`${response.status}: ${await errorMessage(response)}`);
    const voice = await response.json();
    await load(voice.id);
    status.textContent = `stored as ${voice.id}; selected below`;  // once it is
  } catch (error) {
    status.textContent = String(error.message || error);
  } finally {
    $("upload").disabled = false;
  }
}

function drawWave(samples) {
  const canvas = $("wave");
  const g = canvas.getContext("2d");
  g.fillStyle = "#0d1117";
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.strokeStyle = "#58a6ff";
  g.beginPath();
  const step = Math.max(1, Math.floor(samples.length / canvas.width));
  for (let x = 0; x < canvas.width && x * step < samples.length; x++) {
    let peak = 0;
    for (let i = x * step; i < (x + 1) * step && i < samples.length; i++) peak = Math.max(peak, Math.abs(samples[i]));
    const h = peak * canvas.height / 2;
    g.moveTo(x, canvas.height / 2 - h);
    g.lineTo(x, canvas.height / 2 + h);
  }
  g.stroke();
}

async function speak() {
  if (!modelId) await load();
  if (!modelId) return;
  const audio = new AudioContext();
  await audio.resume();
  controller = new AbortController();
  $("speak").disabled = true;
  $("stop").disabled = false;
  for (const id of ["ttfa", "server-timing", "total"]) $(id).textContent = "–";
  setStatus("requesting", "requesting");
  const t0 = performance.now();
  const body = {
    model: modelId,
    input: $("text").value,
    voice: $("voice").value || undefined,
    instructions: $("instructions").value || undefined,
    language: $("language").value || "auto",
    response_format: "pcm",
    stream_format: "jsonl",
  };
  let received = 0;
  const all = [];
  try {
    const response = await fetch("/v1/audio/speech/with-timestamps", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(`${response.status}: ${await errorMessage(response)}`);
    const rate = Number(response.headers.get("X-Audio-Sample-Rate")) || 24000;
    const timing = Object.fromEntries(
      (response.headers.get("Server-Timing") || "").split(",").filter(Boolean).map((part) => {
        const [name, dur] = part.trim().split(";dur=");
        return [name, Number(dur)];
      }));
    $("server-timing").textContent = `${(timing.ttfa ?? NaN).toFixed(0)} ms / ${(timing.queue ?? NaN).toFixed(0)} ms`;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const caption = $("caption");
    caption.replaceChildren();
    let playAt = 0;
    let origin = null; // the AudioContext time of the utterance's first sample
    let pending = ""; // a JSON line split across network chunks
    setStatus("streaming", "streaming");
    const play = (line) => {
      if (line.error) throw new Error(line.error.message);
      for (const word of line.words) {
        const span = document.createElement("span");
        span.textContent = word.word;
        span.dataset.start = word.start_time;
        span.dataset.end = word.end_time;
        caption.append(span, " ");
      }
      const bytes = Uint8Array.from(atob(line.audio_base64), (c) => c.charCodeAt(0));
      if (!bytes.length) return;
      if (received === 0) $("ttfa").textContent = `${(performance.now() - t0).toFixed(0)} ms`;
      const pcm = new Int16Array(bytes.buffer, 0, bytes.length / 2);
      const samples = Float32Array.from(pcm, (s) => s / 32768);
      const buffer = audio.createBuffer(1, samples.length, rate);
      buffer.copyToChannel(samples, 0);
      const source = audio.createBufferSource();
      source.buffer = buffer;
      source.connect(audio.destination);
      playAt = Math.max(playAt, audio.currentTime + 0.05);
      if (origin === null) origin = playAt;
      source.start(playAt);
      playAt += buffer.duration;
      received += samples.length;
      all.push(samples);
      $("audio-seconds").textContent = `${(received / rate).toFixed(2)} s`;
      $("audio-seconds").dataset.samples = String(received);
    };
    const highlight = () => {
      if (origin !== null && !controller && audio.currentTime > playAt) return; // all played
      const t = origin === null ? -1 : audio.currentTime - origin;
      for (const span of caption.children) {
        span.classList.toggle("spoken", t >= Number(span.dataset.start) && t < Number(span.dataset.end));
      }
      requestAnimationFrame(highlight);
    };
    requestAnimationFrame(highlight);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const lines = (pending + value).split("\n");
      pending = lines.pop();
      for (const line of lines) if (line) play(JSON.parse(line));
    }
    const merged = new Float32Array(received);
    let offset = 0;
    for (const part of all) { merged.set(part, offset); offset += part.length; }
    drawWave(merged);
    $("total").textContent = `${(performance.now() - t0).toFixed(0)} ms`;
    setStatus("done", "done");
  } catch (error) {
    setStatus(error.name === "AbortError" ? "stopped" : String(error.message || error), error.name === "AbortError" ? "stopped" : "error");
  } finally {
    $("speak").disabled = false;
    $("stop").disabled = true;
    controller = null;
  }
}

$("speak").addEventListener("click", speak);
$("upload").addEventListener("click", uploadVoice);
$("stop").addEventListener("click", () => controller && controller.abort());
load().catch((error) => setStatus(String(error), "error"));
