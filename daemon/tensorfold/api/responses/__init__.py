"""The Responses API's own parts: its request schema, input items and their chat
form, the response objects and the typed stream events."""
