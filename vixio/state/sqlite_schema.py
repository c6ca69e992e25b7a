"""The SQLite store's schema and its versioned migrations (`PRAGMA user_version`).

A migration is appended, never edited: a file made by an older vixio is brought up to date at
startup, one version at a time, inside one transaction (all or nothing). A file from a newer
vixio is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3

from loguru import logger

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: the first schema
        """CREATE TABLE admissions (
            device_id TEXT PRIMARY KEY, via TEXT NOT NULL, at REAL NOT NULL)""",
        """CREATE TABLE profile_assignments (
            device_id TEXT PRIMARY KEY, profile TEXT NOT NULL, at REAL NOT NULL)""",
        """CREATE TABLE turns (
            device_id TEXT NOT NULL, conversation TEXT NOT NULL, seq INTEGER NOT NULL,
            user_text TEXT NOT NULL, assistant_text TEXT NOT NULL, interrupted INTEGER NOT NULL,
            at REAL NOT NULL, PRIMARY KEY (device_id, conversation, seq))""",
        "CREATE INDEX turns_by_device_time ON turns (device_id, at)",
        "CREATE INDEX turns_by_time ON turns (at)",
        """CREATE TABLE memories (
            device_id TEXT PRIMARY KEY, text TEXT NOT NULL, at REAL NOT NULL)""",
        """CREATE TABLE pairings (
            device_id TEXT NOT NULL, companion TEXT NOT NULL, at REAL NOT NULL,
            PRIMARY KEY (device_id, companion))""",
        """CREATE TABLE live_sessions (
            session_id TEXT PRIMARY KEY, device_id TEXT NOT NULL, worker TEXT NOT NULL,
            started REAL NOT NULL)""",
        "CREATE INDEX live_sessions_by_device ON live_sessions (device_id)",
    ),
    (  # 2: a pairing approval names the companion's Client-Id too
        """CREATE TABLE pairings_2 (
            device_id TEXT NOT NULL, companion TEXT NOT NULL, client_id TEXT NOT NULL, at REAL NOT NULL,
            PRIMARY KEY (device_id, companion, client_id))""",
        "INSERT INTO pairings_2 (device_id, companion, client_id, at) SELECT device_id, companion, '', at FROM pairings",
        "DROP TABLE pairings",
        "ALTER TABLE pairings_2 RENAME TO pairings",
    ),
    (  # 3: workers' heartbeats: a killed worker's sessions leave the directory
        """CREATE TABLE workers (
            worker TEXT PRIMARY KEY, alive_until REAL NOT NULL)""",
    ),
    (  # 4: background results held for a device that is away (vixio/app/task_results.py)
        """CREATE TABLE held_results (
            id INTEGER PRIMARY KEY, device_id TEXT NOT NULL, payload TEXT NOT NULL,
            at REAL NOT NULL, until REAL NOT NULL)""",
        "CREATE INDEX held_results_by_device ON held_results (device_id, id)",
    ),
    (  # 5: windows of limits shared by every process (Store.count_event)
        "CREATE TABLE event_windows (key TEXT PRIMARY KEY, ends REAL NOT NULL, count INTEGER NOT NULL)",
        "CREATE INDEX event_windows_by_end ON event_windows (ends)",
    ),
    (  # 6: who each device is (Store.pin_identity) and the re-binds waiting for an operator
        """CREATE TABLE identity_pins (
            device_id TEXT PRIMARY KEY, client_id TEXT NOT NULL, at REAL NOT NULL, seen REAL NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE rebind_requests (
            device_id TEXT NOT NULL, client_id TEXT NOT NULL, first REAL NOT NULL, last REAL NOT NULL,
            attempts INTEGER NOT NULL, PRIMARY KEY (device_id, client_id)) WITHOUT ROWID""",
    ),
    (  # 7: reminders, their fired occurrences waiting for delivery, notify clips (vixio/state/reminders.py)
        """CREATE TABLE reminders (
            id TEXT PRIMARY KEY, device_id TEXT NOT NULL, text TEXT NOT NULL, due REAL NOT NULL,
            kind TEXT NOT NULL, repeat TEXT NOT NULL, at TEXT NOT NULL, zone TEXT NOT NULL, created REAL NOT NULL)""",
        "CREATE INDEX reminders_by_due ON reminders (due)",
        "CREATE INDEX reminders_by_device ON reminders (device_id, due)",
        """CREATE TABLE fired_reminders (
            occurrence TEXT PRIMARY KEY, device_id TEXT NOT NULL, reminder_id TEXT NOT NULL, text TEXT NOT NULL,
            kind TEXT NOT NULL, due REAL NOT NULL, zone TEXT NOT NULL)""",
        "CREATE INDEX fired_reminders_by_device ON fired_reminders (device_id, due)",
        "CREATE TABLE clips (token TEXT PRIMARY KEY, data BLOB NOT NULL, until REAL NOT NULL)",
    ),
    (  # 8: voiceprints, one per person per device (vixio/state/voiceprints.py)
        """CREATE TABLE voiceprints (
            device_id TEXT NOT NULL, person TEXT NOT NULL, vector BLOB NOT NULL, samples INTEGER NOT NULL,
            at REAL NOT NULL, PRIMARY KEY (device_id, person)) WITHOUT ROWID""",
    ),
    (  # 9: facts about each device's people (vixio/state/facts.py); `person` "" is the household
        """CREATE TABLE facts (
            device_id TEXT NOT NULL, person TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, kind TEXT NOT NULL,
            value TEXT NOT NULL, at REAL NOT NULL, source TEXT NOT NULL, updated REAL NOT NULL,
            PRIMARY KEY (device_id, person, key))""",
    ),
    (  # 10: a fired occurrence a delivery is saying is claimed until then (vixio/state/reminders.py)
        "ALTER TABLE fired_reminders ADD COLUMN claimed_until REAL NOT NULL DEFAULT 0",
    ),
    (  # 11: named claims with a lease (vixio/state/claims.py)
        "CREATE TABLE claims (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until REAL NOT NULL) WITHOUT ROWID",
    ),
)
"""Migration n (from 1) takes a file from version n-1 to n."""

SCHEMA_VERSION = len(MIGRATIONS)


class NewerSchemaError(Exception):
    """The file was written by a newer vixio."""


def migrate(connection: sqlite3.Connection, location: str) -> None:
    """Bring the file to `SCHEMA_VERSION`; several processes starting at once take turns (the
    write lock), and the later ones find nothing left to do."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(f"schema version {version}, this vixio knows up to {SCHEMA_VERSION}")
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                connection.execute(statement)
        if version < SCHEMA_VERSION:
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    if version < SCHEMA_VERSION:
        logger.info("state store {}: schema {} -> {}", location, version or "new", SCHEMA_VERSION)
