"""From a request body to an engine Request: parsing and limits, the schemas and
their fields, the chat format (messages, tools, thinking), the grammar, and the
step that builds the engine Request (build.py)."""
