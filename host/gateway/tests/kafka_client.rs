//! What the Kafka source relies on from its client and a broker, checked against a real
//! broker on `VERDICT_TEST_KAFKA` (`127.0.0.1:9092` by default): topics created through the
//! admin API, binary headers kept byte for byte, a consumer group's committed offset taken
//! up again by the next member, and a paused partition that delivers nothing until resumed.
//! Built with the `kafka` feature only.

#![cfg(feature = "kafka")]

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

fn bootstrap() -> String {
    std::env::var("VERDICT_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A topic of this test's own, made fresh.
async fn topic(name: &str) -> String {
    let name = format!("verdict-test.{name}.{}", std::process::id());
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("an admin client");
    let created = admin
        .create_topics(
            &[NewTopic::new(&name, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("the broker answers CreateTopics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    name
}

fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("a producer")
}

fn consumer(group: &str) -> StreamConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("a consumer")
}

async fn send(producer: &FutureProducer, topic: &str, n: i64) {
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "offset-be",
            value: Some(&n.to_be_bytes()),
        })
        .insert(Header {
            key: "text",
            value: Some("ü"),
        });
    producer
        .send(
            FutureRecord::to(topic)
                .key(&format!("k{n}"))
                .payload(&format!("record {n}"))
                .headers(headers),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| e)
        .expect("the broker acknowledges the record");
}

async fn recv(consumer: &StreamConsumer) -> rdkafka::message::OwnedMessage {
    tokio::time::timeout(Duration::from_secs(20), consumer.recv())
        .await
        .expect("a record within 20 s")
        .expect("a record")
        .detach()
}

#[tokio::test]
async fn headers_offsets_and_a_group_commit_survive_a_new_member() {
    let topic = topic("commit").await;
    let producer = producer();
    for n in 0..4 {
        send(&producer, &topic, n).await;
    }
    let group = format!("verdict-test-group-{}", std::process::id());
    let first = consumer(&group);
    first.subscribe(&[&topic]).unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let m = recv(&first).await;
        let headers = m.headers().expect("headers");
        let value = |name: &str| {
            headers
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
                .map(<[u8]>::to_vec)
        };
        let n = i64::from_be_bytes(value("offset-be").unwrap().try_into().unwrap());
        assert_eq!(value("text").unwrap(), "ü".as_bytes());
        assert_eq!(m.payload(), Some(format!("record {n}").as_bytes()));
        seen.push((n, m.offset()));
    }
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "one partition keeps order"
    );
    // Records 0 and 1 done: commit the next offset to read, 2.
    let mut done = TopicPartitionList::new();
    done.add_partition_offset(&topic, 0, Offset::Offset(seen[2].1))
        .unwrap();
    first.commit(&done, CommitMode::Sync).unwrap();
    drop(first);

    let second = consumer(&group);
    second.subscribe(&[&topic]).unwrap();
    let m = recv(&second).await;
    assert_eq!(
        m.offset(),
        seen[2].1,
        "the next member starts at the committed offset"
    );
}

#[tokio::test]
async fn a_paused_partition_delivers_nothing_until_resumed_from_where_it_was_sought() {
    let topic = topic("pause").await;
    let producer = producer();
    for n in 0..3 {
        send(&producer, &topic, n).await;
    }
    let group = format!("verdict-test-pause-{}", std::process::id());
    let consumer = consumer(&group);
    consumer.subscribe(&[&topic]).unwrap();
    let m = recv(&consumer).await;
    let failed = m.offset();
    let mut partition = TopicPartitionList::new();
    partition.add_partition(&topic, 0);
    consumer.pause(&partition).unwrap();
    // Blocking mode: the failed record is read again after the delay.
    consumer
        .seek(&topic, 0, Offset::Offset(failed), Duration::from_secs(5))
        .unwrap();
    let paused = tokio::time::timeout(Duration::from_millis(1_500), consumer.recv()).await;
    assert!(paused.is_err(), "nothing while paused: {paused:?}");
    consumer.resume(&partition).unwrap();
    let again = recv(&consumer).await;
    assert_eq!(
        again.offset(),
        failed,
        "the failed record comes first again"
    );
}
