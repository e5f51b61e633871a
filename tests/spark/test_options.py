"""Option parsing of the raftq format, without Spark: bad options fail with a clear message."""

from __future__ import annotations

import pytest

from spark.offsets import EARLIEST, LATEST
from spark.raftq.options import OptionError, sink_options, source_options


def test_kafka_names_are_accepted_and_keys_are_case_insensitive() -> None:
    opts = source_options(
        {"Subscribe": "a, b,a", "kafka.bootstrap.servers": "h:1", "INCLUDEHEADERS": "TRUE"},
        streaming=False,
    )
    assert opts.queues == ("a", "b")
    assert opts.bootstrap == "h:1"
    assert opts.include_headers is True
    assert source_options({"topic": "t"}, streaming=False).queues == ("t",)


def test_batch_defaults_are_earliest_to_latest_and_streams_start_at_latest() -> None:
    batch = source_options({"queue": "q"}, streaming=False)
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)
    assert batch.fail_on_data_loss is True
    assert source_options({"queue": "q"}, streaming=True).starting.default == LATEST


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"queue": "a", "subscribe": "a"}, False, "only one of queue, subscribe"),
        ({}, False, "option queue .* is required"),
        ({"queue": " , "}, False, "names no queue"),
        ({"queue": "a", "startingOffsets": "{bad"}, False, "startingOffsets: not 'earliest'"),
        ({"queue": "a", "startingOffsets": "latest"}, False, "empty batch read"),
        ({"queue": "a", "endingOffsets": "earliest"}, False, "empty batch read"),
        ({"queue": "a", "endingOffsets": "latest"}, True, "batch queries only"),
        ({"queue": "a", "failOnDataLoss": "maybe"}, False, "failOnDataLoss must be true or false"),
        ({"queue": "a", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger must be >= 1"),
        ({"queue": "a", "minPartitions": "two"}, False, "minPartitions must be an integer"),
        ({"queue": "a", "startingTimestamp": "noon"}, False, "startingTimestamp"),
    ],
)
def test_bad_source_options_are_refused_with_the_option_named(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        source_options(options, streaming=streaming)


def test_sink_options_check_ids_and_accept_topic() -> None:
    opts = sink_options({"topic": "out", "sinkId": "job-1", "checkpointLocation": "/ck"})
    assert (opts.queue, opts.sink_id, opts.checkpoint) == ("out", "job-1", "/ck")
    with pytest.raises(OptionError, match="sinkId must be"):
        sink_options({"queue": "out", "sinkId": "has:colon"})
    with pytest.raises(OptionError, match="only one of queue, topic"):
        sink_options({"queue": "a", "topic": "b"})


def test_token_option_wins_over_the_driver_environment_and_stays_out_of_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAFTQ_TOKEN", "rqt_from_env")
    given = source_options({"queue": "q", "token": "rqt_given"}, streaming=False)
    assert given.token == "rqt_given"
    assert "rqt_given" not in repr(given)
    assert source_options({"queue": "q"}, streaming=True).token == "rqt_from_env"
    assert sink_options({"queue": "q"}).token == "rqt_from_env"
    monkeypatch.delenv("RAFTQ_TOKEN")
    assert sink_options({"queue": "q"}).token is None


def test_tls_options_and_their_environment_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAFTQ_TLS", "RAFTQ_CA_FILE", "RAFTQ_CERT_FILE", "RAFTQ_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert source_options({"queue": "q"}, streaming=False).tls is None
    tls = source_options({"queue": "q", "tls": "true", "caFile": "/ca.pem"}, False).tls
    assert tls is not None and tls.client_kwargs() == {
        "tls": True, "ca_file": "/ca.pem", "cert_file": None, "key_file": None
    }  # fmt: skip
    assert sink_options({"caFile": "/ca.pem"}).tls is not None  # a file implies tls
    monkeypatch.setenv("RAFTQ_CA_FILE", "/env-ca.pem")
    from_env = sink_options({})
    assert from_env.tls is not None and from_env.tls.ca_file == "/env-ca.pem"
    assert sink_options({"tls": "false"}).tls is None
    with pytest.raises(OptionError, match="tls must be true or false"):
        source_options({"queue": "q", "tls": "maybe"}, streaming=False)
    with pytest.raises(OptionError, match="certFile and keyFile go together"):
        sink_options({"certFile": "/c.pem"})


def test_manager_option_routes_through_the_external_manager_and_excludes_bootstrap() -> None:
    opts = source_options({"queue": "q", "manager": " m:1,m:2 "}, streaming=False)
    assert opts.manager == "m:1,m:2"
    assert sink_options({"queue": "q", "Manager": "m:1"}).manager == "m:1"
    assert source_options({"queue": "q"}, streaming=False).manager is None
    for both in ({"bootstrap": "h:1"}, {"kafka.bootstrap.servers": "h:1"}):
        with pytest.raises(OptionError, match="only one of manager and bootstrap"):
            source_options({"queue": "q", "manager": "m:1", **both}, streaming=False)
        with pytest.raises(OptionError, match="only one of manager and bootstrap"):
            sink_options({"queue": "q", "manager": "m:1", **both})
