"""A Kafka client nobody on this project wrote (kafka-python, pure Python) on both ends of
a Kafka route: it produces records to the route's topic as any producer would, then reads
the route's dead-letter topic as a Spring Kafka user's tooling would, decoding Spring's
`kafka_dlt-*` headers in Spring's own encodings (big-endian binary numbers).

    python kafka_python_client.py BOOTSTRAP TOPIC DLT COUNT EXPECTED_LETTERS TIMEOUT_S

Records `m-0` .. `m-<COUNT-1>` (key and `message-id` header the id, a `tenant: eu` header,
a binary `trace-bin` header, value `{"order": i}`) go to TOPIC; then DLT is read from the
start until EXPECTED_LETTERS records are there or TIMEOUT_S pass, and printed as one JSON
array on stdout.
"""

import json
import struct
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def produce(bootstrap, topic, count):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(count):
        ident = f"m-{i}".encode()
        producer.send(
            topic,
            key=ident,
            value=json.dumps({"order": i}).encode(),
            headers=[
                ("message-id", ident),
                ("tenant", b"eu"),
                ("trace-bin", b"\xff\x00\x01"),
            ],
        ).get(timeout=30)
    producer.flush()
    producer.close()


def decode(record):
    headers = {}
    for name, value in record.headers:
        headers[name] = value
    text = lambda name: headers[name].decode() if name in headers else None
    number = lambda name, fmt: (
        struct.unpack(fmt, headers[name])[0] if name in headers else None
    )
    return {
        "key": record.key.decode() if record.key is not None else None,
        "value": record.value.decode(),
        "tenant": text("tenant"),
        "trace_bin": headers.get("trace-bin", b"").hex(),
        "original_topic": text("kafka_dlt-original-topic"),
        "original_partition": number("kafka_dlt-original-partition", ">i"),
        "original_offset": number("kafka_dlt-original-offset", ">q"),
        "original_timestamp": number("kafka_dlt-original-timestamp", ">q"),
        "original_timestamp_type": text("kafka_dlt-original-timestamp-type"),
        "original_consumer_group": text("kafka_dlt-original-consumer-group"),
        "exception_fqcn": text("kafka_dlt-exception-fqcn"),
        "exception_message": text("kafka_dlt-exception-message"),
        "envelope": json.loads(headers["verdict-envelope"]) if "verdict-envelope" in headers else None,
    }


def read_dlt(bootstrap, dlt, expected, timeout_s):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=1000,
    )
    deadline = time.monotonic() + timeout_s
    letters = []
    while time.monotonic() < deadline and len(letters) < expected:
        partitions = consumer.partitions_for_topic(dlt)
        if not partitions:
            time.sleep(0.5)
            continue
        assigned = [TopicPartition(dlt, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        letters = []
        for record in consumer:
            letters.append(decode(record))
        if len(letters) < expected:
            time.sleep(0.5)
    consumer.close()
    return letters


def main():
    bootstrap, topic, dlt, count, expected, timeout_s = sys.argv[1:7]
    produce(bootstrap, topic, int(count))
    letters = read_dlt(bootstrap, dlt, int(expected), float(timeout_s))
    json.dump(letters, sys.stdout)


if __name__ == "__main__":
    main()
