// The console's entry point: polls GET /health (every second, or
// ?interval=<ms>), shows the served model and the engine, feeds the rate
// tracker and charts, and starts the stored-responses view.
// `window.tensorfoldConsole` is a handle for debugging and for the tests.

import { Api } from "./api.js";
import { RateCharts, RateHistory, RateTracker, RATES } from "./rates.js";
import { ResponsesView } from "./responses.js";

const $ = (id) => document.getElementById(id);

function setting(name, fallback, min, max) {
  const value = Number(new URLSearchParams(location.search).get(name));
  return Number.isFinite(value) && value > 0 ? Math.min(max, Math.max(min, value)) : fallback;
}

const INTERVAL_MS = setting("interval", 1000, 100, 60000);
const WINDOW = setting("window", 120, 10, 3600);

function uptime(seconds) {
  if (typeof seconds !== "number") return "–";
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d ? `${d}d ` : ""}${h}h ${pad(m)}m ${pad(s % 60)}s`;
}

function lanes(health) {
  const maximum = health.streams?.maximum;
  const parallel = health.parallel;
  if (parallel === undefined && maximum === undefined) return "–";
  if (maximum === undefined || maximum === parallel) return String(parallel ?? maximum);
  return `${parallel ?? "–"} (streams at most ${maximum})`;
}

function showServer(health) {
  const facts = {
    model: health.model ?? "–",
    aliases: health.aliases?.length ? health.aliases.join(", ") : "none",
    engine: health.engine ?? "–",
    context: typeof health.context_length === "number"
      ? `${health.context_length.toLocaleString("en-US")} tokens` : "–",
    lanes: lanes(health),
    drafter: health.drafter ?? "–",
    uptime: uptime(health.uptime_seconds),
    version: health.version ?? "–",
  };
  for (const [name, text] of Object.entries(facts)) {
    document.querySelector(`[data-fact="${name}"]`).textContent = text;
  }
}

function showState(state, text) {
  const badge = $("daemon-state");
  badge.dataset.state = state;
  badge.textContent = text;
}

class HealthPoller {
  constructor(charts) {
    this.charts = charts;
    this.tracker = new RateTracker();
    this.history = new RateHistory(WINDOW);
    this.samples = 0; // rate samples taken (baselines not counted)
    this.latest = null;
    this.health = null;
  }

  async poll() {
    try {
      const response = await fetch("/health", { cache: "no-store", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const health = await response.json();
      const rates = this.tracker.sample(health, performance.now() / 1000);
      this.health = health;
      showServer(health);
      showState(health.busy ? "busy" : "serving", health.busy ? "busy" : "serving");
      if (rates) {
        this.samples += 1;
        this.latest = rates;
        this.history.push(Date.now() / 1000, rates);
        this.charts.update(this.history, rates);
      }
    } catch (error) {
      showState("down", "unreachable");
      $("rates-note").textContent = `(last poll failed: ${error.message})`;
      return;
    }
    $("rates-note").textContent = `every ${INTERVAL_MS >= 1000 ? `${INTERVAL_MS / 1000} s` : `${INTERVAL_MS} ms`}`;
  }

  start() {
    const loop = async () => {
      await this.poll();
      this.timer = setTimeout(loop, INTERVAL_MS);
    };
    loop();
  }
}

function main() {
  const api = new Api({
    panel: $("key-panel"), form: $("key-form"), input: $("key-input"), message: $("key-message"),
    forget: $("forget-key"),
  });
  const charts = new RateCharts(
    { tokens: $("chart-tokens"), requests: $("chart-requests"), ratios: $("chart-ratios") },
    $("readouts"),
  );
  const poller = new HealthPoller(charts);
  const responses = new ResponsesView(api, {
    rows: $("responses-rows"), status: $("responses-status"), refresh: $("responses-refresh"),
    next: $("responses-next"), prev: $("responses-prev"), pageLabel: $("responses-page"),
    all: $("responses-all"), deleteSelected: $("responses-delete"),
    detail: $("detail"), detailId: $("detail-id"), detailSummary: $("detail-summary"),
    detailInput: $("detail-input"), detailOutput: $("detail-output"), detailUsage: $("detail-usage"),
    detailMetadata: $("detail-metadata"), detailDelete: $("detail-delete"), detailClose: $("detail-close"),
    continueForm: $("continue-form"), continueInput: $("continue-input"), continueSend: $("continue-send"),
    continueStatus: $("continue-status"),
  });
  window.tensorfoldConsole = { api, charts, poller, responses, RateTracker, RATES, interval: INTERVAL_MS };
  poller.start();
  responses.load();
}

main();
