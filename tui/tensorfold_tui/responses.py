"""The Responses tab: the daemon's stored responses, newest first, a page at a
time (`n` loads the next page), and a screen that shows one of them whole: the
conversation it answered, its output items, usage and TensorFold's statistics."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from .data import fmt_time, one_line

COLUMNS = (("id", "id"), ("created", "created"), ("status", "status"), ("tokens", "in/out"),
           ("preview", "input → output"))
PREVIEW_TAKEN = 48  # columns the other four take, with the cell padding


def short_id(response_id: str) -> str:
    return response_id[:13]


def item_text(item: dict[str, Any]) -> tuple[str, str]:
    """(who, text) of one input or output item of a response."""
    kind = item.get("type", "message")
    if kind == "function_call":
        return f"call {item.get('name', '?')}", str(item.get("arguments", ""))
    if kind == "function_call_output":
        return "tool result", str(item.get("output", ""))
    content = item.get("content")
    if isinstance(content, str):
        text = content
    else:
        parts = [str(p.get("text", "")) for p in content or [] if isinstance(p, dict) and "text" in p]
        images = sum(1 for p in content or [] if isinstance(p, dict) and p.get("type") == "input_image")
        text = "".join(parts) + (f" [{images} image(s)]" if images else "")
    who = "reasoning" if kind == "reasoning" else str(item.get("role", kind))
    return who, text


def response_text(response: dict[str, Any], inputs: list[dict[str, Any]]) -> Text:
    """The whole of one stored response as text for the view screen."""
    out = Text()
    usage = response.get("usage") or {}
    out.append(f"{response.get('id')}\n", style="bold")
    out.append(f"model {response.get('model')} · status {response.get('status')}"
               f" · created {fmt_time(response.get('created_at'))}\n")
    if usage:
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
        out.append(f"tokens: {usage.get('input_tokens')} in ({cached} cached),"
                   f" {usage.get('output_tokens')} out\n")
    stats = response.get("tensorfold") or {}
    if stats.get("decode_tokens_per_second") is not None:
        out.append(f"decode {stats['decode_tokens_per_second']:.1f} tok/s"
                   f" · first token {stats.get('time_to_first_token', 0) * 1000:.0f} ms"
                   f" · drafts {stats.get('accepted', 0)}/{stats.get('drafted', 0)} accepted\n")
    if response.get("previous_response_id"):
        out.append(f"continues {response['previous_response_id']}\n")
    if response.get("instructions"):
        out.append("\ninstructions\n", style="bold")
        out.append(f"{response['instructions']}\n")
    out.append("\nconversation\n", style="bold underline")
    for item in inputs:
        who, text = item_text(item)
        out.append(f"{who}: ", style="bold cyan")
        out.append(f"{text}\n")
    out.append("\noutput\n", style="bold underline")
    for item in response.get("output") or []:
        who, text = item_text(item)
        out.append(f"{who}: ", style="bold green")
        out.append(f"{text}\n")
    if response.get("incomplete_details"):
        out.append(f"\nincomplete: {json.dumps(response['incomplete_details'])}\n", style="yellow")
    return out


class ResponsesView(Vertical):
    """The table of stored responses and a line that says how many and whether more."""

    def compose(self) -> ComposeResult:
        table: DataTable[str] = DataTable(id="responses-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static("press r to load the stored responses", id="responses-note")

    @property
    def table(self) -> DataTable:
        return self.query_one("#responses-table", DataTable)

    def selected_id(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def show(self, rows: list[dict[str, Any]], has_more: bool, error: str = "", append: bool = False) -> None:
        table = self.table
        keep = self.selected_id()
        if not append:
            table.clear()
        width = max(20, self.size.width - PREVIEW_TAKEN)  # the preview column fills the rest
        for row in rows:
            if row["id"] in table.rows:
                continue
            usage = row.get("usage") or {}
            preview = row.get("preview") or {}
            asked = one_line(preview.get("input", ""), width // 3)
            text = f"{asked} → {one_line(preview.get('output', ''), width)}"
            table.add_row(short_id(row["id"]), fmt_time(row.get("created_at")), row.get("status", ""),
                          f"{usage.get('input_tokens', '-')}/{usage.get('output_tokens', '-')}",
                          one_line(text, width), key=row["id"])
        if keep is not None and keep in table.rows:
            table.move_cursor(row=table.get_row_index(keep))
        count = table.row_count
        note = error or (f"{count} stored response{'s' if count != 1 else ''}"
                         f"{' · n: load more' if has_more else ''} · enter: view · d: delete")
        if not count and not error:
            note = "no stored responses (POST /v1/responses stores them by default)"
        self.query_one("#responses-note", Static).update(note)


class ResponseScreen(ModalScreen[None]):
    """One stored response, whole; escape closes it."""

    BINDINGS = [Binding("escape,q", "dismiss", "close")]

    def __init__(self, response_id: str) -> None:
        super().__init__()
        self.response_id = response_id

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="response-box"):
            yield Static(f"loading {self.response_id}…", id="response-body")

    def show(self, response: dict[str, Any] | None, inputs: list[dict[str, Any]], error: str = "") -> None:
        body = self.query_one("#response-body", Static)
        body.update(Text(error, style="red") if response is None else response_text(response, inputs))
