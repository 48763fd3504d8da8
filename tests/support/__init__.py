"""Every helper a test imports, for tests/ and e2e/ alike: where the test tools are,
polling, free ports, a real Prometheus, a `ttsfleet serve` process and speech traffic
against it (runtime, traffic), an in-process server (live_server) and an engine stand-in
(stand_in_engine), engine requests (engine_requests), the qwen-tts reference
(reference, reference_model) and our greedy decoding beside it (greedy), headless
Chromium (chromium), the monitoring files (monitoring), and the e2e operator fixtures
(operator_fixtures, imported by e2e/conftest.py).

Importable as `support.<module>` because pyproject.toml puts tests/ on pytest's
`pythonpath`. Helpers live here, not beside the tests: no test folder goes on sys.path,
and a test never imports a conftest or another test module.
"""
