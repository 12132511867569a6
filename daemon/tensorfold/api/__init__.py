"""The HTTP edge: a Quart app serving the OpenAI-compatible API.

`create_app(engine, config)` builds the app; `serve(app, config)` runs it
under Hypercorn; `ServerThread` runs it on a background thread (tests).
Only this package imports Quart, Hypercorn and pydantic.
"""
