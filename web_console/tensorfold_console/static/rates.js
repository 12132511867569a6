// Rates from /health counters and their live plots (uPlot).
//
// RateTracker mirrors tensorfold/client/rates.py exactly: each sample is
// differenced against the one before; the first sample is only a baseline,
// and a counter going backwards (the daemon restarted) starts a new one.

/* global uPlot */

// name -> [label, unit] of every rate, as in rates.py's RATES
export const RATES = {
  decode_tps: ["decode", "tok/s"],
  prompt_tps: ["prompt", "tok/s"],
  requests_ps: ["requests", "req/s"],
  cached_ratio: ["cached", "ratio"],
  acceptance: ["drafts accepted", "ratio"],
  running: ["running", "streams"],
  queued: ["queued", "requests"],
};

const RESTART_KEYS = ["completion_tokens_total", "prompt_tokens_total", "requests_total"];

// Python's float(health.get(key, 0) or 0)
function counter(health, key) {
  const value = Number(health[key] ?? 0);
  return Number.isFinite(value) ? value : 0;
}

function ratio(part, whole) {
  return whole > 0 ? part / whole : null;
}

export class RateTracker {
  constructor() {
    this.previous = null;
    this.previousTime = 0;
  }

  // The rates since the last sample (`now` in seconds), or null for the
  // first (the baseline) and after a counter went backwards.
  sample(health, now) {
    const before = this.previous;
    const then = this.previousTime;
    this.previous = health;
    this.previousTime = now;
    if (before === null || now <= then) return null;
    const delta = (key) => counter(health, key) - counter(before, key);
    if (RESTART_KEYS.some((key) => delta(key) < 0)) return null;
    const seconds = now - then;
    return {
      decode_tps: delta("completion_tokens_total") / seconds,
      prompt_tps: delta("prompt_tokens_total") / seconds,
      requests_ps: delta("requests_total") / seconds,
      cached_ratio: ratio(delta("cached_tokens_total"), delta("prompt_tokens_total")),
      acceptance: ratio(delta("accepted_total"), delta("drafted_total")),
      running: counter(health, "requests_running"),
      queued: counter(health, "requests_waiting"),
    };
  }
}

// A rolling window of rate samples: times (unix seconds) and one array per rate.
export class RateHistory {
  constructor(capacity = 120) {
    this.capacity = capacity;
    this.times = [];
    this.values = Object.fromEntries(Object.keys(RATES).map((key) => [key, []]));
  }

  push(time, rates) {
    this.times.push(time);
    for (const key of Object.keys(RATES)) this.values[key].push(rates[key] ?? null);
    if (this.times.length > this.capacity) {
      this.times.shift();
      for (const key of Object.keys(RATES)) this.values[key].shift();
    }
  }

  data(keys) {
    return [this.times.slice(), ...keys.map((key) => this.values[key].slice())];
  }
}

export function formatRate(key, value) {
  if (value === null || value === undefined) return "–";
  const unit = RATES[key][1];
  if (unit === "ratio") return `${(value * 100).toFixed(1)} %`;
  if (unit === "streams" || unit === "requests") return String(Math.round(value));
  if (unit === "req/s") return value.toFixed(2);
  return value.toFixed(1);
}

const COLORS = {
  decode_tps: "#2563eb",
  prompt_tps: "#16a34a",
  requests_ps: "#9333ea",
  running: "#ea580c",
  queued: "#dc2626",
  cached_ratio: "#0891b2",
  acceptance: "#ca8a04",
};

// Which rates each chart plots, and its y range.
export const CHARTS = {
  tokens: { keys: ["decode_tps", "prompt_tps"], range: (u, min, max) => [0, Math.max(1, max * 1.1)] },
  requests: { keys: ["requests_ps", "running", "queued"], range: (u, min, max) => [0, Math.max(1, max * 1.1)] },
  ratios: { keys: ["cached_ratio", "acceptance"], range: [0, 1] },
};

const CHART_HEIGHT = 170;

function chartOptions(spec, width) {
  const ratioChart = spec.keys.every((key) => RATES[key][1] === "ratio");
  return {
    width,
    height: CHART_HEIGHT,
    cursor: { drag: { x: false, y: false } },
    legend: { live: false },
    scales: { x: { time: true }, y: { range: spec.range } },
    axes: [
      { stroke: "#555", grid: { stroke: "#eee" }, ticks: { stroke: "#ddd" } },
      {
        stroke: "#555",
        grid: { stroke: "#eee" },
        ticks: { stroke: "#ddd" },
        size: 48,
        values: ratioChart ? (u, ticks) => ticks.map((t) => `${Math.round(t * 100)}%`) : undefined,
      },
    ],
    series: [
      {},
      ...spec.keys.map((key) => ({
        label: `${RATES[key][0]} (${RATES[key][1]})`,
        stroke: COLORS[key],
        width: 1.5,
        points: { show: false },
        value: (u, v) => formatRate(key, v),
      })),
    ],
  };
}

// The three live charts and the readouts above them; `update(history)` redraws.
export class RateCharts {
  constructor(targets, readouts) {
    this.readouts = readouts;
    this.cells = {};
    for (const [key, [label, unit]] of Object.entries(RATES)) {
      const cell = document.createElement("div");
      cell.className = "readout";
      cell.dataset.rate = key;
      cell.style.setProperty("--accent", COLORS[key]);
      const name = document.createElement("span");
      name.className = "label";
      name.textContent = label;
      const value = document.createElement("span");
      value.className = "value";
      value.textContent = "–";
      const units = document.createElement("span");
      units.className = "unit";
      units.textContent = unit === "ratio" ? "" : unit;
      cell.append(name, value, units);
      readouts.append(cell);
      this.cells[key] = value;
    }
    this.plots = {};
    for (const [name, spec] of Object.entries(CHARTS)) {
      const target = targets[name];
      const empty = [[], ...spec.keys.map(() => [])];
      this.plots[name] = new uPlot(chartOptions(spec, this.widthOf(target)), empty, target);
    }
    this.resizer = new ResizeObserver(() => this.resize(targets));
    for (const target of Object.values(targets)) this.resizer.observe(target);
  }

  widthOf(target) {
    return Math.max(200, Math.floor(target.clientWidth || 300));
  }

  resize(targets) {
    for (const [name, plot] of Object.entries(this.plots)) {
      const width = this.widthOf(targets[name]);
      if (width !== plot.width) plot.setSize({ width, height: CHART_HEIGHT });
    }
  }

  update(history, latest) {
    for (const [name, spec] of Object.entries(CHARTS)) this.plots[name].setData(history.data(spec.keys));
    for (const [key, cell] of Object.entries(this.cells)) cell.textContent = formatRate(key, latest?.[key]);
  }
}
