"""The tray icon and the app that puts the pieces together: the controller
(polls and actions off the GUI thread), the shared actions, and either a
system tray icon with the menu or, where no tray exists, the status window."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget

from tensorfold.client import State, Supervisor
from tensorfold.client.supervisor import Status

from .actions import DaemonActions, ask_model_file, cached_models, describe
from .controller import DEFAULT_POLL_MS, DaemonController
from .icons import state_icon
from .login import LoginItem
from .window import StatusWindow

log = logging.getLogger(__name__)


class TrayIcon(QObject):
    """A QSystemTrayIcon whose picture and tooltip follow the daemon's state."""

    def __init__(self, actions: DaemonActions, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.actions = actions
        self.icon_state = State.STOPPED
        self.menu = actions.build_menu()
        self.icon = QSystemTrayIcon(self)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        controller = actions.controller
        controller.status_changed.connect(self.show_status)
        controller.action_started.connect(lambda _name: self.show_status())
        controller.action_finished.connect(lambda _name, _error: self.show_status())
        actions.notice.connect(lambda text: self.icon.showMessage("TensorFold", text,
                                                                  QSystemTrayIcon.MessageIcon.Warning))
        self.show_status()

    def show_status(self, _status: Status | None = None) -> None:
        controller = self.actions.controller
        self.icon_state = controller.status.state
        self.icon.setIcon(state_icon(self.icon_state))
        self.icon.setToolTip(f"TensorFold: {describe(controller.status, controller.pending)}")

    def tooltip(self) -> str:
        return self.icon.toolTip()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        # Trays that only report a plain click (many X11 ones) get the menu there too;
        # the macOS menu bar opens it by itself.
        if (sys.platform != "darwin" and reason is QSystemTrayIcon.ActivationReason.Trigger
                and not self.menu.isVisible()):
            self.menu.popup(QCursor.pos())


class TrayApp(QObject):
    """The whole app for one supervisor: a tray icon, or the status window."""

    def __init__(self, supervisor: Supervisor, *, poll_ms: int = DEFAULT_POLL_MS,
                 login: LoginItem | None = None, list_models: Callable[[], list[str]] = cached_models,
                 choose_file: Callable[[QWidget | None], str | None] = ask_model_file,
                 use_tray: bool | None = None, on_quit: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.controller = DaemonController(supervisor, poll_ms=poll_ms, parent=self)
        self.actions = DaemonActions(self.controller, login or LoginItem(), list_models=list_models,
                                     choose_file=choose_file, parent=self)
        if use_tray is None:
            use_tray = QSystemTrayIcon.isSystemTrayAvailable()
        self.tray: TrayIcon | None = TrayIcon(self.actions, parent=self) if use_tray else None
        self.window: StatusWindow | None = None if use_tray else StatusWindow(self.actions)
        self._on_quit = on_quit or QApplication.quit
        self.actions.quit_requested.connect(self.quit)
        if self.window is not None:
            self.window.closed.connect(self.quit)
        self._closed = False

    @property
    def icon_state(self) -> State:
        return self.tray.icon_state if self.tray is not None else self.window.icon_state

    def status_text(self) -> str:
        """What the tooltip or the status window says now."""
        if self.tray is not None:
            return self.tray.tooltip()
        return self.window.state_text.text()

    def show(self) -> None:
        if self.tray is not None:
            self.tray.icon.show()
            log.info("tray icon shown in the system tray")
        else:
            self.window.show()
            log.info("no system tray: showing the status window")
        self.controller.begin()

    def close(self) -> None:
        """Stop polling and take the icon or window away; the daemon keeps running."""
        if self._closed:
            return
        self._closed = True
        self.controller.shutdown()
        if self.tray is not None:
            self.tray.icon.hide()
        if self.window is not None:
            self.window.blockSignals(True)
            self.window.close()
            self.window.deleteLater()

    def quit(self) -> None:
        self.close()
        self._on_quit()
