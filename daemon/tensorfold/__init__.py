"""TensorFold: a local LLM server with an OpenAI-compatible API."""

__version__ = "0.1.0"
