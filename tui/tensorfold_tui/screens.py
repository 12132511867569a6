"""Modal screens: the model picker (cached models, or a typed folder, .gguf
file or Hugging Face repo id) and a yes/no confirmation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from .data import fmt_size


class ModelPicker(ModalScreen[str | None]):
    """Pick the model the next start or restart serves; escape cancels."""

    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, list_models: Callable[[], list[Any]], current: str | None = None) -> None:
        super().__init__()
        self.list_models = list_models
        self.current = current
        self.values: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-box"):
            yield Label("Serve which model?  enter: choose · tab: type one · escape: cancel", id="picker-title")
            yield OptionList(Option("looking for cached models…", disabled=True), id="picker-models")
            yield Input(placeholder="or type a model folder, a .gguf file or org/name", id="picker-path")

    def on_mount(self) -> None:
        self.query_one("#picker-models", OptionList).focus()
        self.load_models()

    @work(thread=True, exclusive=True)
    def load_models(self) -> None:
        try:
            models = list(self.list_models())
            error = ""
        except Exception as exc:
            models, error = [], f"the model cache could not be read: {exc}"
        self.app.call_from_thread(self.show_models, models, error)

    def show_models(self, models: list[Any], error: str) -> None:
        options = self.query_one("#picker-models", OptionList)
        options.clear_options()
        self.values = [m.name for m in models]
        for i, m in enumerate(models):
            mark = "● " if self.current in (m.name, str(m.path)) else "  "
            options.add_option(Option(f"{mark}{m.name}  {fmt_size(m.size)}  {m.source}", id=f"model-{i}"))
        if not models:
            options.add_option(Option(error or "no cached models: type a folder, a .gguf file or a repo id",
                                      disabled=True))
            self.query_one("#picker-path", Input).focus()
        else:
            options.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        option_id = event.option.id or ""
        if option_id.startswith("model-"):
            self.dismiss(self.values[int(option_id.removeprefix("model-"))])

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if text:
            self.dismiss(text)


class ConfirmScreen(ModalScreen[bool]):
    """A question answered with y (yes) or n / escape (no)."""

    BINDINGS = [Binding("y", "dismiss(True)", "yes"), Binding("n,escape", "dismiss(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(self.question, id="confirm-question")
            yield Label("y: yes · n: no", id="confirm-keys")
