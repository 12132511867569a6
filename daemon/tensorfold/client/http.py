"""A small synchronous client for the daemon's HTTP API: what the front ends
read and change (health, models, stored responses)."""

from __future__ import annotations

from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class DaemonError(Exception):
    """The daemon could not be reached, or answered with an error envelope."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DaemonClient:
    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> Any:
        try:
            reply = self._http.request(method, path, timeout=timeout or self._http.timeout, **kwargs)
        except httpx.HTTPError as exc:
            raise DaemonError(f"no daemon at {self.url}: {exc}") from exc
        if reply.status_code >= 400:
            try:
                message = reply.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = reply.text[:200]
            raise DaemonError(f"{method} {path}: {reply.status_code} {message}", reply.status_code)
        return reply.json()

    def health(self, timeout: float | None = None) -> dict[str, Any]:
        return self._call("GET", "/health", timeout=timeout)

    def alive(self, timeout: float = 1.0) -> bool:
        try:
            self.health(timeout=timeout)
        except DaemonError:
            return False
        return True

    def models(self) -> list[str]:
        return [m["id"] for m in self._call("GET", "/v1/models")["data"]]

    def responses(self, limit: int = 20, after: str | None = None) -> dict[str, Any]:
        """One page of stored responses, newest first: {"data", "has_more", "last_id"}."""
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        return self._call("GET", "/v1/responses", params=params)

    def response(self, response_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/responses/{response_id}")

    def input_items(self, response_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The conversation a stored response answered, oldest first."""
        return self._call("GET", f"/v1/responses/{response_id}/input_items",
                          params={"order": "asc", "limit": limit})["data"]

    def delete_response(self, response_id: str) -> None:
        self._call("DELETE", f"/v1/responses/{response_id}")
