"""State icons drawn at run time with QPainter (no image files): a coloured
disc per daemon state, with a small glyph so the states differ without
colour too (a ring while starting, a bar while busy, "!" on error)."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QIcon, QPainter, QPen, QPixmap

from tensorfold.client import State

STATE_COLOURS: dict[State, str] = {
    State.STOPPED: "#8e8e93",   # grey
    State.STARTING: "#f5a623",  # amber
    State.SERVING: "#34c759",   # green
    State.BUSY: "#0a84ff",      # blue
    State.ERROR: "#ff3b30",     # red
}

STATE_LABELS: dict[State, str] = {
    State.STOPPED: "Stopped",
    State.STARTING: "Starting",
    State.SERVING: "Serving",
    State.BUSY: "Busy",
    State.ERROR: "Error",
}

_SIZES = (16, 22, 32, 64)
_cache: dict[State, QIcon] = {}


def state_pixmap(state: State, size: int = 64) -> QPixmap:
    """One icon image: a disc in the state's colour on a transparent square."""
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    colour = QColor(STATE_COLOURS[state])
    margin = size * 0.08
    disc = QRectF(margin, margin, size - 2 * margin, size - 2 * margin)
    painter.setPen(QPen(colour.darker(130), max(1.0, size / 32)))
    painter.setBrush(colour)
    painter.drawEllipse(disc)
    _draw_glyph(painter, state, disc, size)
    painter.end()
    return pixmap


def _draw_glyph(painter: QPainter, state: State, disc: QRectF, size: int) -> None:
    white = QColor("white")
    centre = disc.center()
    if state is State.STARTING:
        painter.setPen(QPen(white, max(1.5, size / 12)))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        radius = disc.width() * 0.24
        painter.drawEllipse(centre, radius, radius)
    elif state is State.BUSY:
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(white)
        bar_w, bar_h = disc.width() * 0.5, disc.height() * 0.16
        painter.drawRoundedRect(QRectF(centre - QPointF(bar_w / 2, bar_h / 2), centre + QPointF(bar_w / 2, bar_h / 2)),
                                bar_h / 2, bar_h / 2)
    elif state is State.ERROR:
        painter.setPen(white)
        font = QFont()
        font.setBold(True)
        font.setPixelSize(max(8, int(size * 0.6)))
        painter.setFont(font)
        painter.drawText(disc, Qt.AlignmentFlag.AlignCenter, "!")


def state_icon(state: State) -> QIcon:
    """The icon for a state, in the sizes trays and menus ask for (cached)."""
    icon = _cache.get(state)
    if icon is None:
        icon = QIcon()
        for size in _SIZES:
            icon.addPixmap(state_pixmap(state, size))
        _cache[state] = icon
    return icon
