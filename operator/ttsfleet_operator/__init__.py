"""ttsfleet operator: turns a TTSService into GPU Deployments, a Service, an HPA,
spot/on-demand pools and (later) canaries.

Layers, imports pointing one way only:
  tts_service (the resource model) -> render/ (pure spec -> manifests)
  -> reconcile (diff, apply, status) -> handlers (kopf) -> cli.
Nothing here imports torch: the operator image installs `ttsfleet[operator]` only.
"""
