"""`ttsfleet loadtest`: how many real-time streams a deployment holds at the latency users
accept, measured from outside over its public API (HTTP streaming or the WebSocket).

Open-loop arrivals (Poisson or constant, one rate after another) whose scheduled send
times are the measurement origin, so a slow server cannot slow the arrivals down and hide
its own queueing (no coordinated omission); or a closed burst of N streams at once. Per
rate: time to first audio percentiles, playback underruns, audio delivered, refusals and
failures, and the server's GPU memory and running streams from its /metrics. The capacity
knee is the highest rate that still meets the latency and underrun thresholds.

A client: it imports no torch and nothing of the server, so it runs anywhere the API is
reachable. Modules: `timings` (the arithmetic, no I/O), `texts` (what is spoken),
`streams` (one request over HTTP or WebSocket, the /metrics sampler), `runner` (arrivals,
rates, the result), `chart` (the PNG, matplotlib), `command` (the CLI).
"""
