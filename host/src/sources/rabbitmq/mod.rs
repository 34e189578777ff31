//! RabbitMQ (work in progress).
