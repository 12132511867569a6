"""The HTTP routes, one blueprint per family: chat, completions, responses (and
the store), models, health and metrics, and the browser console. Routes call the
request, reply and responses packages; no route imports another."""
