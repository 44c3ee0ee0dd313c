"""The embedded default: a single-node ZooKeeper run as a local process from Debian's jars.

`groupshift zk start|stop|status` drive it; `core.zk.resolve_zk()` falls back to it. Its data,
config, log and pid live under `$GROUPSHIFT_HOME/zk` (default `./.groupshift/zk`): one server per
home directory, so tests (and several users of one machine) each set their own `GROUPSHIFT_HOME`
and a port of their own, and never touch another's server.

    zk = EmbeddedZooKeeper(port=2181)
    zk.start()          # returns once the server answers `ruok` with `imok`
    zk.status()         # {"running": True, "pid": ..., "connect": "127.0.0.1:2181", "mode": "standalone"}
    zk.stop()
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import time
from pathlib import Path

from core.errors import EmbeddedZooKeeperError
from core.four_letter import four_letter

ZK_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
DEFAULT_PORT = 2181
MAX_PID = 1 << 22  # Linux's highest pid_max
STATE_MAX_BYTES = 1 << 16  # the state file holds two small numbers; anything bigger is not ours


def groupshift_home() -> Path:
    return Path(os.environ.get("GROUPSHIFT_HOME", ".groupshift")).resolve()


class EmbeddedZooKeeper:
    """One local ZooKeeper server process; state in `<home>/zk/state.json`."""

    def __init__(self, home: Path | None = None, port: int | None = None, tick_ms: int = 2000):
        self.dir = (home or groupshift_home()) / "zk"
        self.state_file = self.dir / "state.json"
        self.log_file = self.dir / "zookeeper.log"
        self.tick_ms = tick_ms
        self._port = port

    @property
    def port(self) -> int:
        if self._port is not None:
            return self._port
        state = self._state()
        return int(state["port"]) if state else DEFAULT_PORT

    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _state(self) -> dict | None:
        """`{"pid": int, "port": int}` from the state file, or None when there is no state file.

        A state file that cannot be read as one is an `EmbeddedZooKeeperError` that names it and
        says what to do: it is never taken for "not running" (and removed or overwritten), since
        the server it stood for may still run.
        """
        try:
            st = os.stat(self.state_file)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unusable_state(exc.strerror or type(exc).__name__) from None
        if not stat.S_ISREG(st.st_mode):
            raise self._unusable_state(
                "it is a directory" if stat.S_ISDIR(st.st_mode) else "it is not a regular file"
            )
        try:
            with open(self.state_file, "rb") as f:
                raw = f.read(STATE_MAX_BYTES + 1)
        except OSError as exc:
            raise self._unusable_state(exc.strerror or type(exc).__name__) from None
        if len(raw) > STATE_MAX_BYTES:
            raise self._unusable_state(f"it is larger than {STATE_MAX_BYTES} bytes")
        if not raw.strip():
            raise self._unusable_state("it is empty")
        try:
            state = json.loads(raw)
        except (ValueError, RecursionError):
            raise self._unusable_state("it is not JSON") from None
        if not isinstance(state, dict):
            raise self._unusable_state("it is not a JSON object")
        for key, top in (("pid", MAX_PID), ("port", 65535)):
            value = state.get(key)
            if type(value) is not int or not 1 <= value <= top:  # bool is an int too: refused
                raise self._unusable_state(f'its "{key}" is not a whole number in 1..{top}')
        return state

    def _unusable_state(self, why: str) -> EmbeddedZooKeeperError:
        path = self.state_file
        remove = f"remove it ({'rm -r' if path.is_dir() else 'rm'} {path})"
        running = self._servers_from_dir()
        if running:
            todo = (
                f"a ZooKeeper from {self.dir} still runs as pid {', '.join(map(str, running))}: "
                f"stop it (kill {' '.join(map(str, running))}), then {remove}"
            )
        else:
            todo = f"no ZooKeeper runs from {self.dir}: {remove}"
        return EmbeddedZooKeeperError(
            f"the embedded ZooKeeper's state file {path} is unusable ({why}); {todo} and try again"
        )

    def _servers_from_dir(self) -> list[int]:
        """Pids of ZooKeeper servers started with this home's zoo.cfg, found without the state file."""
        cfg = str(self.dir / "zoo.cfg").encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if MAIN_CLASS.encode() in args and cfg in args:
                found.append(int(entry.name))
        return sorted(found)

    def pid(self) -> int | None:
        """The pid of our running server, or None (a stale state file is ignored)."""
        state = self._state()
        if not state:
            return None
        pid = int(state["pid"])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if MAIN_CLASS.encode() in cmdline and str(self.dir).encode() in cmdline else None

    def running_port(self) -> int | None:
        """The client port of our running server (whatever port was asked for), or None."""
        if self.pid() is None:
            return None
        state = self._state()
        return int(state["port"]) if state else None

    def serving(self) -> bool:
        """True when our server runs and accepts connections on its client port."""
        port = self.running_port()
        return port is not None and _accepts("127.0.0.1", port)

    def start(self, timeout: float = 30.0) -> str:
        """Start the server (or reuse ours if it runs) and return the connect string that serves.

        When ours already runs on another port than the one asked for, it is left alone and
        `EmbeddedZooKeeperError` names the address that runs (one server per home directory).
        """
        running = self.running_port()
        if running is not None:
            if self._port is not None and self._port != running:
                raise EmbeddedZooKeeperError(
                    f"the embedded ZooKeeper already runs on 127.0.0.1:{running} (port {self._port} was "
                    f"asked for); stop it first with `groupshift zk stop` to move it, or use it as it is"
                )
            self._port = running
            return self.connect_string()
        # Only here: every command resolves its ZooKeeper through this module, few start it.
        import shutil
        import subprocess

        java = shutil.which("java")
        if not java:
            raise EmbeddedZooKeeperError(
                "Java is missing: install a Java 17 runtime (apt-get install openjdk-17-jre-headless) "
                "or run scripts/setup.sh"
            )
        missing = [j for j in ZK_JARS if not Path(j).exists()]
        if missing:
            raise EmbeddedZooKeeperError(
                f"ZooKeeper jars not found ({', '.join(missing)}): apt-get install zookeeper "
                "or run scripts/setup.sh"
            )
        port = self._port or DEFAULT_PORT
        if not _port_free(port):
            raise EmbeddedZooKeeperError(
                f"port {port} on 127.0.0.1 is already in use: stop what listens there "
                "or choose another with `groupshift zk start --port N`"
            )
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_ms}",
                    f"dataDir={data}",
                    f"clientPort={port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    "4lw.commands.whitelist=*",
                    "admin.enableServer=false",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                ]
            )
            + "\n"
        )
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                [java, "-Xmx512m", "-cp", ":".join(ZK_JARS), MAIN_CLASS, str(cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.state_file.write_text(json.dumps({"pid": proc.pid, "port": port}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.state_file.unlink(missing_ok=True)
                raise EmbeddedZooKeeperError(
                    f"ZooKeeper exited with code {proc.returncode} during start-up; see {self.log_file}"
                )
            if _ruok("127.0.0.1", port):
                self._port = port
                return self.connect_string()
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        self.state_file.unlink(missing_ok=True)
        raise EmbeddedZooKeeperError(f"ZooKeeper did not answer within {timeout:g}s; see {self.log_file}")

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop our server; returns False when it was not running."""
        pid = self.pid()
        if pid is None:
            self.state_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.state_file.unlink(missing_ok=True)
        return True

    def status(self) -> dict:
        pid, port = self.pid(), self.running_port()
        if not pid or port is None:
            return {"running": False, "connect": self.connect_string(), "dir": str(self.dir)}
        self._port = port
        try:
            srvr = four_letter("127.0.0.1", port, "srvr")
            mode = next((ln[6:].strip() for ln in srvr.splitlines() if ln.startswith("Mode:")), "unknown")
        except OSError:
            mode = "not answering"
        return {
            "running": True,
            "pid": pid,
            "connect": self.connect_string(),
            "mode": mode,
            "dir": str(self.dir),
        }


def _port_free(port: int) -> bool:
    """Whether ZooKeeper could bind the port now.

    SO_REUSEADDR as ZooKeeper's own server socket sets it: without it, the TIME_WAIT sockets a
    stopped server leaves behind (it closed its clients' connections first) make the port look
    busy for a minute while nothing listens. A live listener still makes the bind fail.
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _ruok(host: str, port: int) -> bool:
    try:
        return four_letter(host, port, "ruok", timeout=1.0).startswith("imok")
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"
