// The console's HTTP client: same-origin fetches of the daemon's API, the
// API key (kept in sessionStorage, sent as `Authorization: Bearer` on /v1
// calls) and the key form that a 401 opens.

const KEY_STORAGE = "tensorfold.apiKey";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export class Api {
  constructor(elements) {
    this.el = elements; // {panel, form, input, message, forget}
    this.pendingKey = null; // {promise, resolve} while the key form waits
    this.el.form.addEventListener("submit", (event) => {
      event.preventDefault();
      const key = this.el.input.value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY_STORAGE, key);
      this.el.input.value = "";
      this.el.panel.hidden = true;
      this.el.forget.hidden = false;
      const pending = this.pendingKey;
      this.pendingKey = null;
      if (pending) pending.resolve(key);
    });
    this.el.forget.addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      this.el.forget.hidden = true;
    });
    this.el.forget.hidden = !this.key();
  }

  key() {
    return sessionStorage.getItem(KEY_STORAGE);
  }

  // Show the key form; resolves with the key the user enters. Requests that
  // meet a 401 while the form is open all wait for the same answer.
  askForKey(message) {
    this.el.message.textContent = message;
    this.el.panel.hidden = false;
    this.el.input.focus();
    if (!this.pendingKey) {
      let resolve;
      const promise = new Promise((r) => { resolve = r; });
      this.pendingKey = { promise, resolve };
    }
    return this.pendingKey.promise;
  }

  // fetch `path` on this origin; JSON in, JSON out. /v1 calls carry the key
  // and, on a 401, ask for it and try again.
  async request(path, { method = "GET", body } = {}) {
    for (;;) {
      const headers = { Accept: "application/json" };
      const key = this.key();
      if (key && path.startsWith("/v1/")) headers.Authorization = `Bearer ${key}`;
      if (body !== undefined) headers["Content-Type"] = "application/json";
      const response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
      });
      const payload = await response.json().catch(() => null);
      if (response.status === 401 && path.startsWith("/v1/")) {
        if (key) sessionStorage.removeItem(KEY_STORAGE);
        this.el.forget.hidden = true;
        await this.askForKey(key
          ? "That key was refused. Enter the key the server was started with (--api-key)."
          : "This server was started with --api-key. Enter the key to see stored responses; " +
            "it is kept in this tab only (sessionStorage).");
        continue;
      }
      if (!response.ok) {
        const message = payload?.error?.message ?? `${method} ${path}: HTTP ${response.status}`;
        throw new ApiError(response.status, message, payload);
      }
      return payload;
    }
  }

  get(path) {
    return this.request(path);
  }

  post(path, body) {
    return this.request(path, { method: "POST", body });
  }

  delete(path) {
    return this.request(path, { method: "DELETE" });
  }
}
