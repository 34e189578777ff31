//! Every shipped policy and every hostile guest through the real host. One binary, shared
//! helpers in the `verdict_tests` library.

mod admin;
mod admission;
mod alerts;
mod brokers;
mod conformance;
mod console;
mod console_actions;
mod contracts;
mod dashboard;
mod dlq_groups;
mod dlq_tools;
mod gateway;
mod hostile;
mod invariants;
mod language_sdks;
mod languages;
mod layering;
mod loading;
mod operator;
mod ordering;
mod pause;
mod policies;
mod readme;
mod registry;
mod retry_budget;
mod traces;
