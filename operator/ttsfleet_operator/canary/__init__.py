"""Canary rollouts: the state machine (pure), the Prometheus analysis, and what each track serves."""
