"""`tensorfold serve` on a port another server holds: a clear exit before any model loads."""

import socket

import pytest

from tensorfold.cli import main


def test_used_port_exits_before_loading_the_model(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        missing = tmp_path / "no-such-model"          # never resolved: the port is checked first
        with pytest.raises(SystemExit) as exit_info:
            main(["--log-level", "WARNING", "serve", "--model", str(missing), "--port", str(port)])
    message = str(exit_info.value.code)
    assert f"cannot listen on http://127.0.0.1:{port}" in message and "another server" in message
