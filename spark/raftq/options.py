"""The ``raftq`` format's options, parsed once on the driver into frozen values.

Spark hands options over case-insensitively (``dict(options)`` has lower-case
keys), so every name is looked up lower-cased. Kafka's names are accepted
where they mean the same thing (``subscribe``, ``topic``,
``kafka.bootstrap.servers``), so a Kafka job ports by changing the format.
Parsing does no I/O: a bad option fails ``load()`` / ``save()`` / ``start()``
before any task runs. The parsed values are pickled to executors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark.offsets import EARLIEST, LATEST, OffsetError, OffsetSpec, parse_spec, parse_timestamp

DEFAULT_BOOTSTRAP = "127.0.0.1:7101"
QUEUE_ALIASES = ("queue", "subscribe", "topic")
BOOTSTRAP_ALIASES = ("bootstrap", "kafka.bootstrap.servers")
MAX_FETCH = 10_000  # the server's limit on one Read
SINK_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")
BATCH_ID = re.compile(r"^[A-Za-z0-9._\-]{1,32}$")  # with SINK_ID, dedup ids stay < 128 chars


class OptionError(ValueError):
    """An option the user must fix; the message names it."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in dict(options).items() if v is not None}


def _one_of(opts: Mapping[str, str], names: tuple[str, ...], what: str) -> str | None:
    """The value of whichever alias is set; OptionError if two are."""
    given = [n for n in names if str(opts.get(n, "")).strip()]
    if len(given) > 1:
        raise OptionError(f"raftq: give only one of {', '.join(given)} ({what})")
    return str(opts[given[0]]).strip() if given else None


def bootstrap_of(opts: Mapping[str, str]) -> str:
    """``bootstrap`` option, else $RAFTQ_BOOTSTRAP (read on the driver), else the dev default."""
    given = _one_of(opts, BOOTSTRAP_ALIASES, "the cluster address")
    return given or os.environ.get("RAFTQ_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def manager_of(opts: Mapping[str, str]) -> str | None:
    """``manager``: the external cluster manager's addresses (``h:p,h:p``). Given,
    the job reaches the queue's clusters through the manager's mapping (a queue
    may span clusters; docs/operations.md, "Two levels of manager"), so
    ``bootstrap`` must not be given too."""
    given = str(opts.get("manager") or "").strip()
    if not given:
        return None
    if _one_of(opts, BOOTSTRAP_ALIASES, "the cluster address") is not None:
        raise OptionError("raftq: give only one of manager and bootstrap")
    return given


def token_of(opts: Mapping[str, str]) -> str | None:
    """``token`` option, else $RAFTQ_TOKEN where the options are parsed (the
    Python worker that plans the read or write; executors then get the
    options pickled, so they need no environment of their own)."""
    given = str(opts.get("token") or "").strip()
    return given or os.environ.get("RAFTQ_TOKEN") or None


def flag(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = str(opts.get(name.lower(), default)).strip().lower()
    if raw not in ("true", "false"):
        raise OptionError(f"raftq: option {name} must be true or false, got {raw!r}")
    return raw == "true"


def positive_int(opts: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError as exc:
        raise OptionError(f"raftq: option {name} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise OptionError(f"raftq: option {name} must be >= 1, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """Options ``tls``, ``caFile``, ``certFile``, ``keyFile`` (else $RAFTQ_TLS,
    $RAFTQ_CA_FILE, ... on the driver). The files are read where the client is
    made, on the driver and on every executor: they must exist there at the
    same path, as Kafka's ``ssl.truststore.location``."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def client_kwargs(self) -> dict[str, object]:
        return {"tls": True, "ca_file": self.ca_file, "cert_file": self.cert_file,
                "key_file": self.key_file}  # fmt: skip


def tls_of(opts: Mapping[str, str]) -> TlsOptions | None:
    """TLS options of a read or write; None for plaintext. A file implies ``tls``."""
    env = {"tls": "RAFTQ_TLS", "cafile": "RAFTQ_CA_FILE", "certfile": "RAFTQ_CERT_FILE",
           "keyfile": "RAFTQ_KEY_FILE"}  # fmt: skip
    given = {k: str(opts.get(k) or os.environ.get(v) or "").strip() for k, v in env.items()}
    raw = given["tls"].lower()
    if raw not in ("", "true", "false", "1", "0"):
        raise OptionError(f"raftq: option tls must be true or false, got {raw!r}")
    if raw in ("false", "0") or not any(given.values()):
        return None
    if bool(given["certfile"]) != bool(given["keyfile"]):
        raise OptionError("raftq: options certFile and keyFile go together")
    return TlsOptions(given["cafile"] or None, given["certfile"] or None, given["keyfile"] or None)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What a read needs: where, which queues, which offsets, and how to emit rows."""

    bootstrap: str
    queues: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_ms: int | None
    ending_ms: int | None
    include_headers: bool
    fail_on_data_loss: bool
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    fetch_size: int
    token: str | None = field(default=None, repr=False)  # never in logs
    tls: TlsOptions | None = None
    manager: str | None = None  # set: route through the external manager, not bootstrap


def source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Parse and check a read's options; OptionError says which one is wrong and why.

    As Kafka: batch reads default to earliest..latest and refuse
    ``startingOffsets=latest`` / ``endingOffsets=earliest``; streams default
    to latest and refuse ending options; ``startingTimestamp`` wins over
    ``startingOffsets``.
    """
    opts = _lower(options)
    queues = _queues(opts)
    try:
        starting = parse_spec(
            opts.get("startingoffsets"),
            "startingOffsets",
            EARLIEST if not streaming else LATEST,
            queues,
        )
        ending = parse_spec(opts.get("endingoffsets"), "endingOffsets", LATEST, queues)
        starting_ms = parse_timestamp(opts.get("startingtimestamp"), "startingTimestamp")
        ending_ms = parse_timestamp(opts.get("endingtimestamp"), "endingTimestamp")
    except OffsetError as exc:
        raise OptionError(f"raftq: {exc}") from exc
    _check_mode(opts, streaming, starting, ending)
    return SourceOptions(
        bootstrap=bootstrap_of(opts),
        queues=queues,
        starting=starting,
        ending=ending,
        starting_ms=starting_ms,
        ending_ms=ending_ms,
        include_headers=flag(opts, "includeHeaders", False),
        fail_on_data_loss=flag(opts, "failOnDataLoss", True),
        min_partitions=positive_int(opts, "minPartitions"),
        max_offsets_per_trigger=positive_int(opts, "maxOffsetsPerTrigger"),
        fetch_size=min(positive_int(opts, "fetchSize", 5000) or 5000, MAX_FETCH),
        token=token_of(opts),
        tls=tls_of(opts),
        manager=manager_of(opts),
    )


def _queues(opts: Mapping[str, str]) -> tuple[str, ...]:
    given = _one_of(opts, QUEUE_ALIASES, "the queues to read")
    if given is None:
        raise OptionError("raftq: option queue (or subscribe / topic) is required")
    queues = tuple(dict.fromkeys(q.strip() for q in given.split(",") if q.strip()))
    if not queues:
        raise OptionError(f"raftq: option queue names no queue: {given!r}")
    return queues


def _check_mode(
    opts: Mapping[str, str], streaming: bool, starting: OffsetSpec, ending: OffsetSpec
) -> None:
    if streaming:
        for name in ("endingoffsets", "endingtimestamp"):
            if name in opts:
                raise OptionError(f"raftq: option {name} is for batch queries only")
        return
    if starting.default == LATEST and not starting.explicit:
        raise OptionError("raftq: startingOffsets=latest makes an empty batch read")
    if ending.default == EARLIEST and not ending.explicit:
        raise OptionError("raftq: endingOffsets=earliest makes an empty batch read")
    if "subscribepattern" in opts or "assign" in opts:
        raise OptionError("raftq: subscribePattern / assign are not supported: use queue")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """What a write needs. ``queue`` None: each row's ``queue`` column says where."""

    bootstrap: str
    queue: str | None
    sink_id: str | None
    batch_id: str | None
    checkpoint: str | None
    token: str | None = field(default=None, repr=False)  # never in logs
    tls: TlsOptions | None = None
    manager: str | None = None  # set: route through the external manager, not bootstrap


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Parse a write's options; ``sinkId`` and ``batchId`` become part of dedup ids."""
    opts = _lower(options)
    sink_id = opts.get("sinkid")
    if sink_id is not None and not SINK_ID.match(sink_id):
        raise OptionError(
            f"raftq: option sinkId must be 1-64 characters of A-Z a-z 0-9 . _ -, got {sink_id!r}"
        )
    batch_id = opts.get("batchid")
    if batch_id is not None and not BATCH_ID.match(batch_id):
        raise OptionError(f"raftq: option batchId must be 1-32 of A-Z a-z 0-9 . _ -: {batch_id!r}")
    return SinkOptions(
        bootstrap=bootstrap_of(opts),
        queue=_one_of(opts, ("queue", "topic"), "the queue to write to"),
        sink_id=sink_id,
        batch_id=batch_id,
        checkpoint=opts.get("checkpointlocation"),
        token=token_of(opts),
        tls=tls_of(opts),
        manager=manager_of(opts),
    )
