"""From the engine's deltas to what the client reads: one body or server-sent
events (generation.py, sse.py), the chat and completions objects (payloads.py),
the reply parser's events (chat_reply.py), and the /metrics text (metrics.py)."""
