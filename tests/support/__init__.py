"""What tests in tests/ and e2e/ share: where the test tools are, polling, free ports,
a real Prometheus, a `ttsfleet serve` process and speech traffic against it.

Importable as `support.<module>` because pyproject.toml puts tests/ on pytest's
`pythonpath`.
"""
