"""packaging/: the launchd agent and its install script, the macOS app
bundle, the systemd user unit (checked with `systemd-analyze verify` where it
exists) and its install script, the desktop entry (`desktop-file-validate`),
and the tray app's "Launch at login" switch on Linux and macOS. Service
managers are stand-in programs on PATH that record how they were called."""

from __future__ import annotations

import configparser
import os
import plistlib
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import platformdirs.macos
import pytest

from tensorfold.cli import _parser as cli_parser
from tensorfold.client.services import LAUNCHD_LABEL, SYSTEMD_UNIT, LaunchdAgent
from tensorfold_gui.login import TRAY_LABEL, LoginItem, desktop_exec

pytestmark = pytest.mark.ui

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"
MACOS, LINUX = PACKAGING / "macos", PACKAGING / "linux"


def _program(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _recorder(folder: Path, name: str) -> Path:
    """A stand-in for a service manager that appends its arguments to folder/calls."""
    return _program(folder / name, f'echo "$@" >> "{folder}/calls"')


def _run(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def _serve_host(args_file: Path) -> str:
    """The --host that `tensorfold serve @args_file` would listen on."""
    return cli_parser().parse_args(["serve", f"@{args_file}"]).host


def _desktop_entry(path: Path) -> dict[str, str]:
    if shutil.which("desktop-file-validate"):
        done = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str
    parser.read(path)
    return dict(parser["Desktop Entry"])


# -- macOS ---------------------------------------------------------------------

def test_the_agent_template_runs_tensorfold_serve_with_the_platformdirs_paths(monkeypatch, tmp_path):
    agent = plistlib.loads((MACOS / "dev.tensorfold.daemon.plist").read_bytes())
    assert agent["Label"] == LAUNCHD_LABEL
    assert agent["ProgramArguments"] == ["tensorfold", "serve", "@~/Library/Application Support/tensorfold/serve.args"]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["StandardOutPath"] == agent["StandardErrorPath"] == "~/Library/Logs/tensorfold/daemon.log"
    # the same folders DaemonPaths gets from platformdirs on a Mac
    monkeypatch.setenv("HOME", str(tmp_path))
    mac = platformdirs.macos.MacOS("tensorfold", appauthor=False)
    home = lambda p: "~" + p.removeprefix(str(tmp_path))     # noqa: E731
    assert agent["StandardOutPath"] == home(mac.user_log_dir) + "/daemon.log"
    assert agent["ProgramArguments"][2] == "@" + home(mac.user_config_dir) + "/serve.args"


def test_install_agent_fills_in_the_paths_and_bootstraps_it(tmp_path):
    home = tmp_path / "home & <co>"
    tools = tmp_path / "bin"
    _recorder(tools, "launchctl")
    tensorfold = _program(tmp_path / "venv dir" / "bin" / "tensorfold")
    env = {**os.environ, "HOME": str(home), "PATH": f"{tools}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    _run(MACOS / "install-agent", "--tensorfold", str(tensorfold), env=env)

    plist = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    agent = plistlib.loads(plist.read_bytes())
    args_file = home / "Library" / "Application Support" / "tensorfold" / "serve.args"
    assert agent["ProgramArguments"] == [str(tensorfold), "serve", f"@{args_file}"]
    assert agent["StandardOutPath"] == str(home / "Library" / "Logs" / "tensorfold" / "daemon.log")
    assert (home / "Library" / "Logs" / "tensorfold").is_dir()
    assert _serve_host(args_file) == "127.0.0.1"                  # loopback until told otherwise
    assert LaunchdAgent(Path(agent["StandardOutPath"]), agents=plist.parent).installed()
    domain = f"gui/{os.getuid()}"
    assert (tools / "calls").read_text().splitlines() == [f"bootout {domain}/{LAUNCHD_LABEL}",
                                                         f"bootstrap {domain} {plist}"]
    args_file.write_text("--host\n127.0.0.1\n--model\nmine\n")
    _run(MACOS / "install-agent", "--tensorfold", str(tensorfold), "--no-start", env=env)
    assert "mine" in args_file.read_text()                       # settings are kept
    _run(MACOS / "install-agent", "--remove", env=env)
    assert not plist.exists()
    assert (tools / "calls").read_text().splitlines()[-1] == f"bootout {domain}/{LAUNCHD_LABEL}"


def test_build_app_makes_a_menu_bar_only_bundle_that_runs_the_tray(tmp_path):
    tray = _program(tmp_path / "it's here" / "tensorfold-tray", f'echo "$@" > "{tmp_path}/ran"')
    _run(MACOS / "build-app", "--tray", str(tray), "--dest", str(tmp_path / "Applications"),
         env={**os.environ, "HOME": str(tmp_path)})
    contents = tmp_path / "Applications" / "TensorFold.app" / "Contents"
    info = plistlib.loads((contents / "Info.plist").read_bytes())
    assert info["LSUIElement"] is True                    # no Dock icon
    assert info["CFBundlePackageType"] == "APPL" and info["CFBundleIdentifier"] == TRAY_LABEL
    launcher = contents / "MacOS" / info["CFBundleExecutable"]
    assert os.access(launcher, os.X_OK)
    subprocess.run([str(launcher), "--url", "http://127.0.0.1:9"], check=True, timeout=30)
    assert (tmp_path / "ran").read_text().split() == ["--url", "http://127.0.0.1:9"]
    # the login switch finds the bundle there and launches it
    login = LoginItem(platform="darwin", home=tmp_path)
    assert login.command == [str(launcher)]


# -- Linux ---------------------------------------------------------------------

def _unit(path: Path) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str
    unit.read(path)
    return unit


def test_the_unit_serves_the_args_file_and_creates_it_for_loopback(tmp_path):
    unit = _unit(LINUX / "tensorfold.service")
    service = unit["Service"]
    assert service["ExecStart"] == "%h/.local/bin/tensorfold serve @%E/tensorfold/serve.args"
    assert service["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"
    # ExecStartPre, with %E as systemd fills it in: makes a loopback args file once
    pre = shlex.split(service["ExecStartPre"].replace("%E", str(tmp_path / "config")))
    assert pre[:2] == ["/bin/sh", "-c"]
    subprocess.run(pre, check=True, timeout=30)
    args_file = tmp_path / "config" / "tensorfold" / "serve.args"
    assert args_file.read_text() == "--host\n127.0.0.1\n"
    assert _serve_host(args_file) == "127.0.0.1"
    assert stat.S_IMODE(args_file.stat().st_mode) == 0o600        # it may hold an --api-key
    args_file.write_text("--host\n0.0.0.0\n")
    subprocess.run(pre, check=True, timeout=30)
    assert _serve_host(args_file) == "0.0.0.0"                    # an existing file is kept


@pytest.fixture
def unit_home(tmp_path) -> tuple[dict[str, str], Path]:
    """An environment with a temporary home and a recording systemctl on PATH."""
    tools = tmp_path / "bin"
    _program(tools / "systemctl", f'echo "$@" >> "{tools}/calls"')
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
           "XDG_RUNTIME_DIR": str(runtime), "PATH": f"{tools}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    return env, tools


def test_install_unit_names_the_real_program_and_enables_it(unit_home, tmp_path):
    env, tools = unit_home
    tensorfold = _program(tmp_path / "odd dir%1" / "tensorfold")
    _run(LINUX / "install-unit", "--tensorfold", str(tensorfold), env=env)
    installed = tmp_path / "home" / ".config" / "systemd" / "user" / SYSTEMD_UNIT
    exec_start = _unit(installed)["Service"]["ExecStart"]
    assert shlex.split(exec_start.replace("%%", "%"))[0] == str(tensorfold)
    assert exec_start.endswith(" serve @%E/tensorfold/serve.args")
    assert (tools / "calls").read_text().splitlines() == [
        "--user show-environment", "--user daemon-reload", "--user enable --now tensorfold.service"]
    _run(LINUX / "install-unit", "--remove", env=env)
    assert not installed.exists()
    assert "--user disable --now tensorfold.service" in (tools / "calls").read_text().splitlines()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_installed_unit_passes_systemd_analyze_verify(unit_home, tmp_path):
    env, _tools = unit_home
    tensorfold = _program(tmp_path / "venv" / "bin" / "tensorfold")
    _run(LINUX / "install-unit", "--tensorfold", str(tensorfold), "--no-start", env=env)
    installed = tmp_path / "home" / ".config" / "systemd" / "user" / SYSTEMD_UNIT
    done = subprocess.run(["systemd-analyze", "--user", "verify", str(installed)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    # the check has teeth: a program that is not there fails it
    tensorfold.unlink()
    done = subprocess.run(["systemd-analyze", "--user", "verify", str(installed)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "not executable" in done.stderr


def test_the_desktop_entry_is_valid_and_installs_with_the_real_program(tmp_path):
    entry = _desktop_entry(LINUX / "tensorfold-tray.desktop")
    assert entry["Type"] == "Application" and entry["Exec"] == "tensorfold-tray"
    tray = _program(tmp_path / "venv" / "bin" / "tensorfold-tray")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    _run(LINUX / "install-desktop-entry", "--tray", str(tray), env=env)
    installed = _desktop_entry(tmp_path / "data" / "applications" / "tensorfold-tray.desktop")
    assert installed["Exec"] == installed["TryExec"] == str(tray)


# -- Launch at login -------------------------------------------------------------

@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_launch_at_login_switches_on_and_off(platform, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    command = ["/opt/my apps/python3", "-m", "tensorfold_gui", "--url", "http://127.0.0.1:8080/?a=1&b=%2"]
    login = LoginItem(platform=platform, home=tmp_path / "home", command=command)
    expected = (tmp_path / "home" / "Library" / "LaunchAgents" / f"{TRAY_LABEL}.plist" if platform == "darwin"
                else tmp_path / "config" / "autostart" / "tensorfold-tray.desktop")
    assert login.path == expected and not login.is_enabled()
    assert login.set_enabled(True) and expected.is_file()
    if platform == "darwin":
        agent = plistlib.loads(expected.read_bytes())
        assert agent["Label"] == TRAY_LABEL and agent["RunAtLoad"] is True
        assert agent["ProgramArguments"] == command
    else:
        entry = _desktop_entry(expected)
        assert entry["Exec"] == desktop_exec(command)
        assert entry["X-GNOME-Autostart-enabled"] == "true"
    assert not login.set_enabled(False) and not expected.exists()
    login.disable()                                   # off twice is fine


def test_a_hidden_autostart_entry_counts_as_off(tmp_path):
    login = LoginItem(platform="linux", home=tmp_path, config_home=tmp_path / "config", command=["tensorfold-tray"])
    login.enable()
    login.path.write_text(login.path.read_text() + "Hidden=true\n")
    assert not login.is_enabled()


def test_desktop_exec_quotes_the_way_the_spec_asks():
    assert desktop_exec(["/usr/bin/tensorfold-tray"]) == "/usr/bin/tensorfold-tray"
    assert desktop_exec(["/a b/python", "x$y", "100%"]) == '"/a b/python" "x\\\\$y" "100%%"'
