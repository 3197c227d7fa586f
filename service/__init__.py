"""memfold as an HTTP service: ``memfold serve`` (FastAPI + uvicorn), API keys, limits, metrics, the /ui page."""
