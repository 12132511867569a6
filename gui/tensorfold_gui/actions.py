"""The app's actions, shared by the tray menu and the status window: Start,
Stop, Restart, the model picker (cached models and "Choose a file…"), Open
console, Open logs, Launch at login and Quit, kept enabled, checked and
labelled to match the daemon's state."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtGui import QAction, QActionGroup, QDesktopServices
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from tensorfold.client import State
from tensorfold.client import cached_models as client_models
from tensorfold.client.supervisor import Status

from .controller import DaemonController
from .icons import STATE_LABELS, state_icon
from .login import LoginItem

log = logging.getLogger(__name__)

PENDING_LABELS = {"start": "Starting…", "stop": "Stopping…", "restart": "Restarting…", "model": "Switching model…"}


def cached_models() -> list[str]:
    """What `--model` accepts without a download (the model cache, the HF hub cache)."""
    try:
        return [m.name for m in client_models()]
    except Exception as exc:          # an unreadable cache must not break the menu
        log.warning("cannot list cached models: %s", exc)
        return []


def ask_model_file(parent: QWidget | None = None) -> str | None:
    """A file dialog for a .gguf file or a model folder's config.json."""
    picked, _ = QFileDialog.getOpenFileName(parent, "Choose a model", str(Path.home()),
                                            "Models (*.gguf config.json);;All files (*)")
    return picked or None


def model_label(name: str) -> str:
    """A short menu label: a path's last part, else the name (a cache name or repo id)."""
    return Path(name).name if os.path.isabs(name) else name


def describe(status: Status, pending: str | None = None) -> str:
    """One line for the menu's first entry, the tooltip and the status window."""
    if pending:
        return PENDING_LABELS.get(pending, "Working…")
    model = model_label(status.model) if status.model else "no model chosen"
    if status.state is State.ERROR:
        return f"Error: {status.message or 'the daemon failed'}"
    if status.state is State.STOPPED:
        return f"Stopped ({model})"
    where = "" if status.managed_by in (None, "process") else f", {status.managed_by}"
    return f"{STATE_LABELS[status.state]}: {model} at {status.url}{where}"


class DaemonActions(QObject):
    notice = Signal(str)          # something the user should see (a failed action)
    quit_requested = Signal()

    def __init__(self, controller: DaemonController, login: LoginItem,
                 list_models: Callable[[], list[str]] = cached_models,
                 choose_file: Callable[[QWidget | None], str | None] = ask_model_file,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.controller, self.login = controller, login
        self.list_models, self.choose_file = list_models, choose_file
        self.status_line = QAction(describe(controller.status), self)
        self.status_line.setEnabled(False)
        self.start = self._action("&Start", controller.start)
        self.stop = self._action("S&top", controller.stop)
        self.restart = self._action("&Restart", controller.restart)
        self.models_menu = QMenu("&Model")
        self.models_menu.aboutToShow.connect(self.rebuild_models)
        self._model_group = QActionGroup(self)
        self.choose_model_file = QAction("Choose a &file…", self)
        self.choose_model_file.triggered.connect(self._choose_file)
        self.open_console = self._action("Open &console", self._open_console)
        self.open_logs = self._action("Open lo&gs", self._open_logs)
        self.launch_at_login = QAction("&Launch at login", self)
        self.launch_at_login.setCheckable(True)
        self.launch_at_login.setChecked(login.is_enabled())
        self.launch_at_login.toggled.connect(self._set_login)
        self.quit = self._action("&Quit", self.quit_requested.emit)
        controller.status_changed.connect(self.refresh)
        controller.action_started.connect(lambda _name: self.refresh())
        controller.action_finished.connect(self._finished)
        self.rebuild_models()
        self.refresh()

    def _action(self, text: str, slot: Callable[[], None]) -> QAction:
        action = QAction(text, self)
        action.triggered.connect(lambda _checked=False: slot())
        return action

    def build_menu(self, parent: QWidget | None = None) -> QMenu:
        menu = QMenu(parent)
        menu.addAction(self.status_line)
        menu.addSeparator()
        for action in (self.start, self.stop, self.restart):
            menu.addAction(action)
        menu.addMenu(self.models_menu)
        menu.addSeparator()
        menu.addAction(self.open_console)
        menu.addAction(self.open_logs)
        menu.addSeparator()
        menu.addAction(self.launch_at_login)
        menu.addAction(self.quit)
        return menu

    # -- state -----------------------------------------------------------------

    def refresh(self, _status: Status | None = None) -> None:
        ctl = self.controller
        status = ctl.status
        self.status_line.setText(describe(status, ctl.pending))
        self.status_line.setIcon(state_icon(status.state))
        self.start.setEnabled(ctl.can_start())
        self.stop.setEnabled(ctl.can_control())
        self.restart.setEnabled(ctl.can_control())
        for action in self._model_group.actions():
            action.setEnabled(ctl.pending is None)
        self.choose_model_file.setEnabled(ctl.pending is None)
        self.open_console.setEnabled(status.state in (State.SERVING, State.BUSY))
        self._check_model()

    def _finished(self, name: str, error: str) -> None:
        if error:
            self.notice.emit(f"{name.capitalize()} failed: {error}")
        if name == "model":
            self.rebuild_models()         # a chosen file joins the menu
        self.refresh()

    # -- models ----------------------------------------------------------------

    def current_model(self) -> str | None:
        return self.controller.supervisor.chosen_model()

    def rebuild_models(self) -> None:
        """Refill the model menu: the cached models, the chosen one, "Choose a file…"."""
        for action in self._model_group.actions():
            self._model_group.removeAction(action)
            action.deleteLater()
        self.models_menu.clear()
        names = list(dict.fromkeys(self.list_models()))
        chosen = self.current_model()
        if chosen and chosen not in names:
            names.append(chosen)
        for name in names:
            action = QAction(model_label(name), self._model_group)
            action.setCheckable(True)
            action.setData(name)
            action.setToolTip(name)
            action.triggered.connect(lambda _checked=False, name=name: self.serve_model(name))
            self.models_menu.addAction(action)
        if not names:
            self.models_menu.addAction("No cached models").setEnabled(False)
        self.models_menu.addSeparator()
        self.models_menu.addAction(self.choose_model_file)
        self.refresh()

    def model_action(self, name: str) -> QAction | None:
        return next((a for a in self._model_group.actions() if a.data() == name), None)

    def _check_model(self) -> None:
        chosen = self.current_model()
        for action in self._model_group.actions():
            action.setChecked(action.data() == chosen)

    def serve_model(self, name: str) -> None:
        self.controller.serve_model(name)

    def _choose_file(self) -> None:
        picked = self.choose_file(None)
        if not picked:
            return
        path = Path(picked)
        if path.name == "config.json":
            path = path.parent            # a Hugging Face style folder
        self.serve_model(str(path))

    # -- the rest --------------------------------------------------------------

    def _open_console(self) -> None:
        QDesktopServices.openUrl(QUrl(self.controller.supervisor.url + "/console"))

    def _open_logs(self) -> None:
        supervisor = self.controller.supervisor
        log_file = supervisor.paths.log_file
        if not log_file.is_file() and supervisor.service is not None:
            # a systemd unit logs to the journal: open a snapshot of its tail
            log_file = log_file.with_name("daemon-journal.log")
            log_file.parent.mkdir(parents=True, exist_ok=True)
            log_file.write_text("\n".join(supervisor.log_tail(1000)) + "\n")
        if not log_file.is_file():
            self.notice.emit(f"No log yet: {log_file}")
            return
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_file)))

    def _set_login(self, on: bool) -> None:
        try:
            now = self.login.set_enabled(on)
        except OSError as exc:
            self.notice.emit(f"Launch at login: {exc}")
            now = self.login.is_enabled()
        if now != on:
            self.launch_at_login.blockSignals(True)
            self.launch_at_login.setChecked(now)
            self.launch_at_login.blockSignals(False)

