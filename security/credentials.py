"""Users' SASL credentials in ZooKeeper, where and how Kafka kept them in its ZooKeeper era.

    /config/users/<user>
        {"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}
    /config/changes/config_change_<seq>
        {"version":2,"entity_path":"users/<user>"}

The user's znode is Kafka's `ConfigEntityZNode` for the entity type `users`, named by the user
URL-encoded as Kafka's `Sanitizer` does (`sanitize`); its config holds one entry per mechanism,
in `ScramCredential.to_kafka`'s form. Kafka's brokers read them from there and learn of a change
from the sequential notification written with it. PLAIN had no stored form in Kafka (its
passwords sat in JAAS files); groupshift stores a verifier under the key `PLAIN`, in the same
form (`security.scram.plain_verifier`: PBKDF2, never the password). Other keys of a user's config
(Kafka's quotas) are kept as they are.

`CredentialStore` reads and writes them (the `groupshift users` command); a write and its
notification are one ZooKeeper transaction, conditional on the version it read. `CredentialCache`
is a node's view: a user's credentials are read on first use, off the event loop, and kept until a
notification names the user (or the session is lost).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from core.errors import GroupshiftError
from security.sasl import MECHANISMS
from security.scram import MAX_PLAIN_FIELD_BYTES, ScramCredential

log = logging.getLogger(__name__)

USERS = "/config/users"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
ENTITY_TYPE = "users"
# Kafka's brokers delete notifications older than this (ZkNodeChangeNotificationListener's
# changeExpirationMs); the writers here do the same, so the notifications stay few.
CHANGE_EXPIRATION_S = 15 * 60
MAX_USER_LENGTH = 255
MAX_PASSWORD_BYTES = MAX_PLAIN_FIELD_BYTES  # RFC 4616's limit, for every mechanism
MAX_PASSWORD_FILE_BYTES = MAX_PASSWORD_BYTES + 2
MAX_CONFIG_BYTES = 100_000  # a user's config znode read (its credentials and Kafka's quotas)
MAX_LISTED_USERS = 100_000
MAX_CACHED_USERS = 10_000  # a node's cache of users' credentials (least recently used dropped)
WRITE_ATTEMPTS = 5  # conditional writes retried when another writer changed the user meanwhile
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize(user: str) -> str:
    """A user name as its znode's name: URL-encoded as Kafka's `Sanitizer.sanitize` does.

    >>> sanitize("alice"), sanitize("a b*/é")
    ('alice', 'a%20b%2A%2F%C3%A9')
    """
    return "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode()) for ch in user)


def desanitize(name: str) -> str:
    """The user a znode name stands for (Kafka's `Sanitizer.desanitize`: URL decoding).

    >>> desanitize("a%20b%2A%2F%C3%A9")
    'a b*/é'
    """
    from urllib.parse import unquote_plus

    return unquote_plus(name)


def user_path(user: str) -> str:
    return f"{USERS}/{sanitize(user)}"


def check_user(user: str) -> str:
    """`user` if it can name a SASL user; raises `GroupshiftError` saying why not."""
    if not user:
        raise GroupshiftError("the user name is empty")
    if len(user) > MAX_USER_LENGTH:
        raise GroupshiftError(f"the user name is {len(user)} characters long; at most {MAX_USER_LENGTH}")
    if any(ch.isspace() or not ch.isprintable() for ch in user):
        raise GroupshiftError(f"user name {user!r} has whitespace or control characters")
    if user.startswith("User:"):
        raise GroupshiftError(f"give the user name without Kafka's principal prefix: {user[5:]!r}")
    return user


def read_password_file(path: str | os.PathLike) -> str:
    """The password a file holds (its one line, the line ending dropped); raises `GroupshiftError`
    when the file is readable by others, missing, empty, not one line, or longer than a password."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            raise GroupshiftError(f"the password file {p} is not a regular file")
        if st.st_mode & stat.S_IROTH:
            raise GroupshiftError(f"the password file {p} is readable by others; chmod o-r {p}")
        if st.st_size > MAX_PASSWORD_FILE_BYTES:
            raise GroupshiftError(
                f"the password file {p} has {st.st_size} bytes; a password has at most {MAX_PASSWORD_BYTES}"
            )
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise GroupshiftError(f"cannot read the password file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise GroupshiftError(f"the password file {p} is not UTF-8 text") from None
    password = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if not password:
        raise GroupshiftError(f"the password file {p} is empty")
    if any(ch in password for ch in "\r\n\0"):
        raise GroupshiftError(
            f"the password file {p} holds more than one line (or a NUL); write the password alone"
        )
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise GroupshiftError(f"the password in {p} has more than {MAX_PASSWORD_BYTES} bytes (PLAIN's limit)")
    return password


def parse_config(data: bytes | None) -> dict[str, str]:
    """A config znode's `config` map (Kafka's `ConfigEntityZNode.decode`); raises `ValueError`."""
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not JSON") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ValueError('not {"version":1,"config":{NAME: STRING, ...}}')
    return config


def encode_config(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


def credentials_in(config: dict[str, str], where: str = "") -> dict[str, ScramCredential]:
    """The SASL credentials a user's config holds, by mechanism (an unreadable one is left out)."""
    out = {}
    for mechanism in MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.from_kafka(text)
        except ValueError as exc:
            log.warning("ignoring the %s credential of %s: %s", mechanism, where or "a user", exc)
    return out


def change_notification(user: str) -> bytes:
    """The notification Kafka writes beside a user's changed config."""
    return json.dumps(
        {"version": 2, "entity_path": f"{ENTITY_TYPE}/{sanitize(user)}"}, separators=(",", ":")
    ).encode()


def user_of_notification(data: bytes) -> str | None:
    """The user a change notification names (None: another entity type, or unreadable)."""
    try:
        path = json.loads(data).get("entity_path", "")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    kind, slash, name = str(path).partition("/")
    return desanitize(name) if kind == ENTITY_TYPE and slash and "/" not in name else None


class CredentialStore:
    """Read and write users' credentials on a started kazoo client (blocking calls)."""

    def __init__(self, zk: KazooClient):
        self.zk = zk

    def _read(self, user: str) -> tuple[dict[str, str], int | None]:
        """The user's config and its znode's version (None: no znode)."""
        try:
            data, stat = self.zk.get(user_path(user))
        except NoNodeError:
            return {}, None
        if len(data or b"") > MAX_CONFIG_BYTES:
            raise GroupshiftError(f"{user_path(user)} holds {len(data)} bytes; is it a Kafka user config?")
        try:
            return parse_config(data), stat.version
        except ValueError as exc:
            raise GroupshiftError(
                f"{user_path(user)} is not a Kafka user config ({exc}); fix or delete it"
            ) from None

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        """`user`'s credentials by mechanism (empty when there is no such user)."""
        config, _ = self._read(user)
        return credentials_in(config, user)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user with a credential, sorted by name (at most `MAX_LISTED_USERS` read)."""
        try:
            names = sorted(self.zk.get_children(USERS))
        except NoNodeError:
            return {}
        if len(names) > MAX_LISTED_USERS:
            raise GroupshiftError(f"{USERS} has {len(names)} users; at most {MAX_LISTED_USERS} are listed")
        reads = [(name, self.zk.get_async(f"{USERS}/{name}")) for name in names]
        out = {}
        for name, pending in reads:
            try:
                data, _ = pending.get()
                config = parse_config(data)
            except NoNodeError:
                continue
            except ValueError:
                log.warning("%s/%s is not a Kafka user config; left out", USERS, name)
                continue
            creds = credentials_in(config, desanitize(name))
            if creds:
                out[desanitize(name)] = creds
        return out

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        """Set `user`'s credential for `mechanism` (replacing one it had), with its notification."""
        self._update(user, lambda config: config.update({mechanism: credential.to_kafka()}))

    def remove(self, user: str, mechanisms: Iterable[str]) -> list[str]:
        """Remove `user`'s credentials for `mechanisms`; return those it had. Kafka's way: the
        user's znode stays, with what else its config holds (possibly nothing)."""
        removed: list[str] = []

        def drop(config: dict[str, str]) -> None:
            removed[:] = [m for m in mechanisms if config.pop(m, None) is not None]

        self._update(user, drop, only_if=lambda config: any(m in config for m in mechanisms))
        return removed

    def _update(self, user: str, change, only_if=None) -> None:
        self.zk.ensure_path(USERS)
        self.zk.ensure_path(CHANGES)
        for _ in range(WRITE_ATTEMPTS):
            config, version = self._read(user)
            if only_if is not None and not only_if(config):
                return
            change(config)
            txn = self.zk.transaction()
            if version is None:
                txn.create(user_path(user), encode_config(config))
            else:
                txn.set_data(user_path(user), encode_config(config), version=version)
            txn.create(f"{CHANGES}/{CHANGE_PREFIX}", change_notification(user), sequence=True)
            results = txn.commit()
            if not any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in results):
                failed = [r for r in results if isinstance(r, Exception)]
                if failed:
                    raise failed[0]
                self.purge_notifications()
                return
        raise GroupshiftError(f"{user_path(user)} kept changing under this command; run it again")

    def purge_notifications(self, now: float | None = None) -> int:
        """Delete the change notifications older than `CHANGE_EXPIRATION_S` (as Kafka's brokers do)."""
        now = time.time() if now is None else now
        try:
            names = sorted(n for n in self.zk.get_children(CHANGES) if n.startswith(CHANGE_PREFIX))
        except NoNodeError:
            return 0
        stats = [(n, self.zk.exists_async(f"{CHANGES}/{n}")) for n in names[:-1]]  # the newest stays
        old = [
            n for n, s in stats if (st := s.get()) is not None and st.ctime / 1000 < now - CHANGE_EXPIRATION_S
        ]
        for name in old:
            try:
                self.zk.delete(f"{CHANGES}/{name}")
            except NoNodeError:
                pass
        return len(old)


def _sequence(name: str) -> int:
    digits = name[len(CHANGE_PREFIX) :]
    return int(digits) if name.startswith(CHANGE_PREFIX) and digits.isdigit() else -1


class CredentialCache:
    """A node's view of users' credentials (see the module docstring); every method on the event loop.

    cache = CredentialCache(zk)
    await cache.start()                  # the change notifications watched from here on
    creds = await cache.get("alice")     # {"SCRAM-SHA-256": ScramCredential, ...}
    """

    def __init__(self, zk: KazooClient, max_users: int = MAX_CACHED_USERS):
        self.zk = zk
        self.store = CredentialStore(zk)
        self.max_users = max_users
        self._cache: OrderedDict[str, dict[str, ScramCredential]] = OrderedDict()
        self._generation = 0  # moves on every invalidation: a read that started before it is not kept
        self._last_seen = -1  # the newest notification handled
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch: ChildrenWatch | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._watch_changes)
        self.zk.add_listener(self._on_state)

    def _watch_changes(self) -> None:
        self.zk.ensure_path(USERS)
        self.zk.ensure_path(CHANGES)
        first = True

        def on_children(names: list[str]) -> None:
            nonlocal first
            newest = max(map(_sequence, names), default=-1)
            if first:  # what was written before this node started needs no invalidation
                first = False
                self._last_seen = newest
                return
            fresh = sorted(n for n in names if _sequence(n) > self._last_seen)
            self._last_seen = max(self._last_seen, newest)
            if fresh:
                self._loop.call_soon_threadsafe(self._changed, fresh)

        self._watch = ChildrenWatch(self.zk, CHANGES, on_children)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST and self._loop is not None:  # notifications may have been missed
            self._loop.call_soon_threadsafe(self.invalidate, None)

    def _changed(self, names: list[str]) -> None:
        task = asyncio.ensure_future(self._read_changes(names))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_changes(self, names: list[str]) -> None:
        for name in names:
            try:
                data, _ = await asyncio.to_thread(self.zk.get, f"{CHANGES}/{name}")
            except Exception:  # noqa: BLE001 - purged already, or ZooKeeper away: forget everyone
                self.invalidate(None)
                continue
            user = user_of_notification(data)
            if user is not None:
                self.invalidate(user)

    def _read(self, user: str) -> dict[str, ScramCredential]:
        try:
            return self.store.credentials(user)
        except GroupshiftError as exc:  # a config that is not Kafka's: no credentials
            log.warning("user %s cannot authenticate: %s", user, exc)
            return {}

    def invalidate(self, user: str | None) -> None:
        """Forget `user`'s credentials (None: everyone's); the next look-up reads ZooKeeper."""
        self._generation += 1
        if user is None:
            self._cache.clear()
        else:
            self._cache.pop(user, None)

    async def get(self, user: str) -> dict[str, ScramCredential]:
        """`user`'s credentials by mechanism (empty: no such user); raises when ZooKeeper cannot answer."""
        found = self._cache.get(user)
        if found is not None:
            self._cache.move_to_end(user)
            return found
        generation = self._generation
        found = await asyncio.to_thread(self._read, user)
        if generation == self._generation:
            self._cache[user] = found
            while len(self._cache) > self.max_users:
                self._cache.popitem(last=False)
        return found
