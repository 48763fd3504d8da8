"""The runtime's HTTP face: an OpenAI-compatible speech API over one engine.

`app.create_app(engine, settings)` builds the FastAPI application; `serve.run`
starts it under uvicorn with SIGTERM draining. Nothing here imports torch: the
engine is handed in already built.
"""
