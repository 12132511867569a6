// Stored responses: the paged listing (GET /v1/responses, 20 a page, ?after
// cursors), one response opened (its conversation, output, usage and
// metadata), deleting one or many, and continuing a conversation with a new
// turn (POST /v1/responses with previous_response_id).

const PAGE_SIZE = 20;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function preview(text) {
  const cell = el("td", "preview", text ?? "");
  cell.title = text ?? "";
  return cell;
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" }) : "–";
}

function partText(part) {
  if (typeof part === "string") return part;
  if (part?.text !== undefined) return part.text;
  if (part?.type === "input_image") return "[image]";
  return `[${part?.type ?? "part"}]`;
}

// [label, text] for one conversation or output item.
export function describeItem(item) {
  const content = item.content;
  const text = typeof content === "string" ? content
    : Array.isArray(content) ? content.map(partText).join("\n") : "";
  switch (item.type ?? "message") {
    case "message": return [item.role ?? "message", text];
    case "reasoning": return ["reasoning", text];
    case "function_call": return [`tool call ${item.call_id ?? ""}`.trim(), `${item.name}(${item.arguments})`];
    case "function_call_output":
      return [`tool result ${item.call_id ?? ""}`.trim(),
        typeof item.output === "string" ? item.output : JSON.stringify(item.output)];
    default: return [item.type, JSON.stringify(item)];
  }
}

function fillItems(list, items) {
  list.replaceChildren();
  if (!items.length) list.append(el("li", "muted", "(none)"));
  for (const item of items) {
    const [label, text] = describeItem(item);
    const row = el("li", `item item-${item.role ?? item.type ?? "message"}`);
    row.append(el("span", "item-label", label), el("pre", "item-text", text));
    list.append(row);
  }
}

function fillTable(table, pairs) {
  table.replaceChildren();
  if (!pairs.length) {
    const row = table.insertRow();
    const cell = row.insertCell();
    cell.className = "muted";
    cell.textContent = "(none)";
  }
  for (const [key, value] of pairs) {
    const row = table.insertRow();
    row.append(el("th", "", key), el("td", "", String(value)));
  }
}

// "input_tokens_details.cached_tokens" -> value, for every number in usage
function flatten(object, prefix = "") {
  const out = [];
  for (const [key, value] of Object.entries(object ?? {})) {
    if (value && typeof value === "object") out.push(...flatten(value, `${prefix}${key}.`));
    else out.push([`${prefix}${key}`, value]);
  }
  return out;
}

export class ResponsesView {
  constructor(api, elements, onError) {
    this.api = api;
    this.el = elements;
    this.onError = onError;
    this.cursors = [null]; // the ?after of each page visited; the last is this page's
    this.page = { data: [], has_more: false, last_id: null };
    this.selected = new Set();
    this.openId = null;
    this.el.refresh.addEventListener("click", () => this.load());
    this.el.next.addEventListener("click", () => this.turn(+1));
    this.el.prev.addEventListener("click", () => this.turn(-1));
    this.el.all.addEventListener("change", () => this.selectAll(this.el.all.checked));
    this.el.deleteSelected.addEventListener("click", () => this.deleteSelected());
    this.el.detailDelete.addEventListener("click", () => this.deleteOpen());
    this.el.detailClose.addEventListener("click", () => this.close());
    this.el.continueForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.continueOpen();
    });
  }

  status(text) {
    this.el.status.textContent = text;
  }

  async load() {
    const after = this.cursors[this.cursors.length - 1];
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (after) query.set("after", after);
    try {
      this.page = await this.api.get(`/v1/responses?${query}`);
    } catch (error) {
      this.status(`Could not list stored responses: ${error.message}`);
      this.onError?.(error);
      return;
    }
    if (!this.page.data.length && this.cursors.length > 1) {
      this.cursors.pop(); // this page emptied (deleted or evicted): show the one before
      return this.load();
    }
    this.render();
  }

  turn(step) {
    if (step > 0 && this.page.has_more && this.page.last_id) this.cursors.push(this.page.last_id);
    else if (step < 0 && this.cursors.length > 1) this.cursors.pop();
    else return;
    this.selected.clear();
    this.load();
  }

  render() {
    const ids = new Set(this.page.data.map((row) => row.id));
    for (const id of [...this.selected]) if (!ids.has(id)) this.selected.delete(id);
    const rows = this.page.data.map((entry) => this.row(entry));
    this.el.rows.replaceChildren(...rows);
    if (!rows.length) {
      const empty = el("tr");
      const cell = el("td", "muted", "No stored responses yet. POST /v1/responses keeps each reply here.");
      cell.colSpan = 7;
      empty.append(cell);
      this.el.rows.append(empty);
    }
    const number = this.cursors.length;
    this.el.pageLabel.textContent = `page ${number}`;
    this.el.prev.disabled = number <= 1;
    this.el.next.disabled = !this.page.has_more;
    this.status(rows.length ? `${rows.length} on this page${this.page.has_more ? ", more on the next" : ""}` : "");
    this.syncSelection();
  }

  row(entry) {
    const tr = el("tr");
    tr.dataset.id = entry.id;
    if (entry.id === this.openId) tr.classList.add("open");
    const box = el("input");
    box.type = "checkbox";
    box.checked = this.selected.has(entry.id);
    box.setAttribute("aria-label", `Select ${entry.id}`);
    box.addEventListener("change", () => {
      if (box.checked) this.selected.add(entry.id);
      else this.selected.delete(entry.id);
      this.syncSelection();
    });
    const check = el("td", "check");
    check.append(box);
    const link = el("button", "link", entry.id);
    link.type = "button";
    link.addEventListener("click", () => this.open(entry.id));
    const idCell = el("td", "id");
    idCell.append(link);
    const usage = entry.usage ?? {};
    tr.append(
      check,
      el("td", "nowrap", when(entry.created_at)),
      idCell,
      el("td", `status status-${entry.status}`, entry.status),
      el("td", "num", `${usage.input_tokens ?? "–"} / ${usage.output_tokens ?? "–"}`),
      preview(entry.preview?.input),
      preview(entry.preview?.output),
    );
    return tr;
  }

  selectAll(checked) {
    for (const entry of this.page.data) {
      if (checked) this.selected.add(entry.id);
      else this.selected.delete(entry.id);
    }
    for (const box of this.el.rows.querySelectorAll("input[type=checkbox]")) box.checked = checked;
    this.syncSelection();
  }

  syncSelection() {
    const count = this.selected.size;
    this.el.deleteSelected.disabled = count === 0;
    this.el.deleteSelected.textContent = count ? `Delete selected (${count})` : "Delete selected";
    this.el.all.checked = count > 0 && this.page.data.every((entry) => this.selected.has(entry.id));
  }

  async remove(ids) {
    const failed = [];
    for (const id of ids) {
      try {
        await this.api.delete(`/v1/responses/${encodeURIComponent(id)}`);
      } catch (error) {
        if (error.status !== 404) failed.push(`${id}: ${error.message}`); // 404: already gone
      }
      this.selected.delete(id);
      if (id === this.openId) this.close();
    }
    await this.load();
    this.status(failed.length ? `Could not delete ${failed.join("; ")}` : `Deleted ${ids.length}.`);
  }

  deleteSelected() {
    return this.remove([...this.selected]);
  }

  deleteOpen() {
    return this.openId ? this.remove([this.openId]) : undefined;
  }

  close() {
    this.openId = null;
    this.el.detail.hidden = true;
    for (const tr of this.el.rows.querySelectorAll("tr.open")) tr.classList.remove("open");
  }

  async inputItems(id) {
    const items = [];
    let after = null;
    for (;;) {
      const query = new URLSearchParams({ order: "asc", limit: "100" });
      if (after) query.set("after", after);
      const page = await this.api.get(`/v1/responses/${encodeURIComponent(id)}/input_items?${query}`);
      items.push(...page.data);
      if (!page.has_more || !page.last_id) return items;
      after = page.last_id;
    }
  }

  async open(id) {
    let response, items;
    try {
      [response, items] = await Promise.all([
        this.api.get(`/v1/responses/${encodeURIComponent(id)}`), this.inputItems(id)]);
    } catch (error) {
      this.status(`Could not open ${id}: ${error.message}`);
      return;
    }
    this.openId = id;
    const d = this.el;
    d.detailId.textContent = id;
    const parts = [`${response.status}`, `model ${response.model}`, `created ${when(response.created_at)}`];
    if (response.previous_response_id) parts.push(`continues ${response.previous_response_id}`);
    if (response.incomplete_details?.reason) parts.push(`cut: ${response.incomplete_details.reason}`);
    if (response.error?.message) parts.push(`error: ${response.error.message}`);
    d.detailSummary.textContent = parts.join(" · ");
    fillItems(d.detailInput, items);
    fillItems(d.detailOutput, response.output ?? []);
    fillTable(d.detailUsage, flatten(response.usage));
    fillTable(d.detailMetadata, Object.entries(response.metadata ?? {}));
    d.continueStatus.textContent = "";
    d.detail.hidden = false;
    for (const tr of d.rows.querySelectorAll("tr")) tr.classList.toggle("open", tr.dataset.id === id);
  }

  async continueOpen() {
    const text = this.el.continueInput.value.trim();
    const previous = this.openId;
    if (!text || !previous) return;
    this.el.continueSend.disabled = true;
    this.el.continueStatus.textContent = "Generating…";
    try {
      const response = await this.api.post("/v1/responses", { input: text, previous_response_id: previous });
      this.el.continueInput.value = "";
      this.cursors = [null];
      await this.load();
      await this.open(response.id);
    } catch (error) {
      this.el.continueStatus.textContent = `Failed: ${error.message}`;
    } finally {
      this.el.continueSend.disabled = false;
    }
  }
}
