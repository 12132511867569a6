"""The status window: the same actions as the tray menu, in a small window,
for desktops without a system tray (or with `--window`)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import (QGridLayout, QHBoxLayout, QLabel, QSizePolicy, QToolButton,
                               QVBoxLayout, QWidget)

from tensorfold.client import State
from tensorfold.client.supervisor import Status

from .actions import DaemonActions, describe
from .icons import state_pixmap


class StatusWindow(QWidget):
    closed = Signal()

    def __init__(self, actions: DaemonActions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.actions = actions
        self.icon_state = State.STOPPED
        self.setWindowTitle("TensorFold")
        self.state_icon = QLabel()
        self.state_text = QLabel()
        self.state_text.setWordWrap(True)
        self.state_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("color: #b00020")
        self.notice.hide()

        top = QHBoxLayout()
        top.addWidget(self.state_icon)
        top.addWidget(self.state_text, 1)
        buttons = QGridLayout()
        self.buttons: dict[str, QToolButton] = {}
        row = [("start", actions.start), ("stop", actions.stop), ("restart", actions.restart)]
        for column, (name, action) in enumerate(row):
            buttons.addWidget(self._button(name, action), 0, column)
        model = QToolButton()
        model.setText("Model")
        model.setMenu(actions.models_menu)
        model.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        model.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        model.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.buttons["model"] = model
        buttons.addWidget(model, 0, 3)
        row = [("console", actions.open_console), ("logs", actions.open_logs),
               ("login", actions.launch_at_login), ("quit", actions.quit)]
        for column, (name, action) in enumerate(row):
            buttons.addWidget(self._button(name, action), 1, column)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.notice)
        layout.addLayout(buttons)

        actions.controller.status_changed.connect(self.show_status)
        actions.controller.action_started.connect(lambda _name: self.show_status())
        actions.controller.action_finished.connect(lambda _name, _error: self.show_status())
        actions.notice.connect(self.show_notice)
        self.show_status()

    def _button(self, name: str, action: QAction) -> QToolButton:
        button = QToolButton()
        button.setDefaultAction(action)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        button.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.buttons[name] = button
        return button

    def show_status(self, _status: Status | None = None) -> None:
        controller = self.actions.controller
        self.icon_state = controller.status.state
        self.state_icon.setPixmap(state_pixmap(self.icon_state, 32))
        self.state_text.setText(describe(controller.status, controller.pending))
        self.setWindowIcon(self.actions.status_line.icon())

    def show_notice(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.setVisible(bool(text))

    def closeEvent(self, event: QCloseEvent) -> None:
        """Closing the only window quits the app (the daemon keeps running)."""
        self.closed.emit()
        super().closeEvent(event)
