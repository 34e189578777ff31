"""The export glue, run natively against stand-ins for componentize-py's bindings: results,
lowering, lazy details from the instance's one `details` resource, batches, logging and the panic path
(guest-sdk/src/export.rs)."""

from __future__ import annotations

import random
import unittest
from dataclasses import dataclass

import sdk_support
from example_policy import Decider as OrdersDecider
from example_policy import Orders
from sdk_support import (
    Action_DeadLetter,
    Action_Delay,
    Action_Discard,
    Action_Pause,
    Action_Retry,
    Err,
    FakeHost,
    Label,
    Level,
    WitClass,
    WitSeverity,
    failure_details,
    wit_failure,
)
import verdict_sdk
from verdict_sdk import Class, Failure, Severity, Verdict


@dataclass
class NoConfig:
    pass


class Probe(verdict_sdk.Policy):
    """Reads everything the host offers, then answers what the failure's kind asks for."""

    name = "probe"
    version = "0.0.1"
    description = "test policy"
    Config = NoConfig

    def __init__(self, config: NoConfig) -> None:
        self.seen: list[Failure] = []

    def decide(self, f: Failure) -> Verdict:
        self.seen.append(f)
        for _ in range(2):
            _ = (f.topic, f.message_id, f.headers, f.payload, f.history, f.published_at_ms, f.first_failed_at_ms)
        verdict_sdk.info(f"deciding {f.kind}")
        if f.kind == "boom":
            raise ZeroDivisionError("division by zero")
        if f.kind == "none":
            return None  # type: ignore[return-value]
        if f.kind == "delay":
            return Verdict.delay(30_000).alert(Severity.INFO)
        if f.kind == "pause":
            return Verdict.pause(15_000)
        if f.kind == "blank":
            return Verdict.retry_now().because("")
        if f.kind == "discard":
            return Verdict.discard(Class.PERMANENT).because("duplicate")
        if f.kind == "badtext":
            return Verdict.discard(Class.PERMANENT).because("dup\udc80")
        if f.kind == "dead":
            return Verdict.dead_letter(Class.POISON).label("a", "1").label("b", "2")
        return Verdict.retry_after(f.jitter_seed).because(f.topic)


class Dice(Probe):
    """Draws from `random`, which the glue reseeds from each failure's jitter seed."""

    def decide(self, f: Failure) -> Verdict:
        return Verdict.retry_after(random.randrange(1_000_000)).because(str(random.random()))


class Broken(Probe):
    def __init__(self, config: NoConfig) -> None:
        raise KeyError("oops")


class ExportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.host = FakeHost()
        sdk_support.install_bindings(self.host)
        self.addCleanup(sdk_support.uninstall_bindings)

    def test_init_returns_config_errors_as_the_result(self) -> None:
        decider = OrdersDecider()
        self.assertIsNone(decider.init('{"max_attempts": 3}'))
        with self.assertRaises(Err) as caught:
            decider.init('{"max_atempts": 3}')
        self.assertIn("max_atempts", caught.exception.value)
        with self.assertRaises(Err) as caught:
            decider.init('{"max_attempts": 0}')
        self.assertEqual(caught.exception.value, "config.max_attempts: must be at least 1")
        # A refused config keeps the policy already configured, as in Rust.
        verdict = decider.decide(wit_failure("db.timeout", attempt=3))
        self.assertEqual(verdict.class_, WitClass.EXHAUSTED)
        self.assertEqual(self.host.logs, [], "a refused config is an answer, not a fault")

    def test_the_policy_is_shared_by_every_decider_object(self) -> None:
        # componentize-py instantiates `Decider` once per exported function: the object that
        # answers `decide` is not the one that received `init`.
        exported = verdict_sdk.export(Probe)
        exported().init("{}")
        v = exported().decide(wit_failure("delay"))
        self.assertEqual(v.action, Action_Delay(30_000))

    def test_describe(self) -> None:
        info = OrdersDecider().describe()
        self.assertEqual((info.name, info.version), ("orders", "1.0.0"))
        self.assertEqual(info.description, "Retries transient order failures, dead-letters the rest.")

    def test_decide_lowers_every_action(self) -> None:
        decider = verdict_sdk.export(Probe)()
        decider.init("")
        v = decider.decide(wit_failure("db.timeout", jitter_seed=2**64 - 1))
        self.assertEqual(v.action, Action_Retry(2**64 - 1))
        self.assertEqual((v.class_, v.reason, v.alert, v.labels), (WitClass.TRANSIENT, "orders", WitSeverity.NONE, []))
        v = decider.decide(wit_failure("delay"))
        self.assertEqual((v.action, v.alert), (Action_Delay(30_000), WitSeverity.INFO))
        v = decider.decide(wit_failure("dead"))
        self.assertEqual(v.action, Action_DeadLetter())
        self.assertEqual(v.labels, [Label("a", "1"), Label("b", "2")])
        self.assertEqual(decider.decide(wit_failure("discard")).action, Action_Discard())

    def test_the_failure_is_lifted_with_lazy_host_details(self) -> None:
        probe_decider = verdict_sdk.export(Probe)()
        probe_decider.init("{}")
        probe_decider.decide(
            wit_failure("db.timeout", attempt=4, deferrals=1, deadline_ms=9_000, now_ms=2_000)
        )
        f = probe_decider._policy.seen[-1]
        self.assertEqual((f.attempt, f.deferrals, f.now_ms, f.deadline_ms, f.first_failed_at_ms), (4, 1, 2_000, 9_000, 100))
        self.assertEqual((f.stats.window_ms, f.stats.consecutive_failures), (60_000, 2))
        self.assertEqual(f.headers[0].name, "Trace-Id")
        self.assertEqual(f.history[0].message, "first")
        self.assertEqual(f.age_ms, 1_500)
        for name in ("topic", "message_id", "headers", "payload", "history", "published_at_ms", "first_failed_at_ms"):
            self.assertEqual(self.host.calls.get(name), 1, name)
        self.assertNotIn("consumer_group", self.host.calls)
        self.assertEqual({position for _, position in self.host.asked}, {0}, "decide's failure is at 0")
        self.assertEqual(f.extension("source"), "nats")
        # A new decision fetches afresh: the details belong to one failure. The handle does
        # not: the instance made one, on the first fact it read, and keeps it.
        probe_decider.decide(wit_failure("db.timeout"))
        self.assertEqual(self.host.calls["topic"], 2)
        self.assertEqual(self.host.handles_made, 1)

    def test_a_policy_that_reads_no_details_makes_no_handle(self) -> None:
        # A class of its own: `OrdersDecider`'s handle, had an earlier test made one, would
        # hide one made here.
        decider = verdict_sdk.export(Orders)()
        decider.init("{}")
        decider.decide(wit_failure("db.timeout"))
        decider.decide_batch([wit_failure("db.timeout"), wit_failure("json.parse")])
        self.assertEqual(self.host.handles_made, 0)

    def test_a_verdict_without_a_reason_lowers_it_as_none(self) -> None:
        decider = verdict_sdk.export(Probe)()
        decider.init("{}")
        # Contract 0.2's reason is an option: none unless the policy gave one, as in Rust.
        self.assertIsNone(decider.decide(wit_failure("delay")).reason)
        self.assertIsNone(decider.decide(wit_failure("blank")).reason)
        self.assertEqual(decider.decide(wit_failure("discard")).reason, "duplicate")
        self.assertIsNone(OrdersDecider().decide(wit_failure("db.timeout")).reason)

    def test_decide_batch_answers_each_failure_in_order_from_its_own_details(self) -> None:
        self.host.failures = [failure_details("orders", "m-1"), failure_details("invoices", "m-2")]
        self.host.extensions = [{"source": "nats"}, {"source": "kafka"}]
        decider = verdict_sdk.export(Probe)()
        decider.init("{}")
        verdicts = decider.decide_batch(
            [wit_failure("db.timeout", jitter_seed=5), wit_failure("delay", jitter_seed=6)]
        )
        self.assertEqual([v.action for v in verdicts], [Action_Retry(5), Action_Delay(30_000)])
        self.assertEqual([v.reason for v in verdicts], ["orders", None])
        first, second = decider._policy.seen
        self.assertEqual((first.topic, first.message_id, first.kind), ("orders", "m-1", "db.timeout"))
        self.assertEqual((second.topic, second.message_id, second.kind), ("invoices", "m-2", "delay"))
        self.assertEqual((first.extension("source"), second.extension("source")), ("nats", "kafka"))
        # Each failure asked about its own position, and at most once per part.
        read = ("topic", "message_id", "headers", "payload", "history", "published_at_ms", "first_failed_at_ms", "extension")
        self.assertEqual(sorted(self.host.asked), sorted((name, i) for i in (0, 1) for name in read))
        self.assertEqual(self.host.calls["topic"], 2)

    def test_a_batch_answers_as_each_failure_alone(self) -> None:
        decider = OrdersDecider()
        decider.init('{"max_attempts": 3}')
        failures = [
            wit_failure(kind, attempt=attempt, jitter_seed=seed)
            for kind in ("db.timeout", "json.parse", "http.503")
            for attempt in (1, 2, 3)
            for seed in (0, 7, 2**64 - 1)
        ]
        alone = [decider.decide(f) for f in failures]
        self.assertEqual(decider.decide_batch(failures), alone)
        self.assertEqual(decider.decide_batch([]), [])

    def test_random_is_reseeded_for_every_failure_of_a_batch(self) -> None:
        decider = verdict_sdk.export(Dice)()
        decider.init("{}")
        batch = decider.decide_batch(
            [wit_failure(jitter_seed=7), wit_failure(jitter_seed=8), wit_failure(jitter_seed=7)]
        )
        self.assertEqual(batch[0], batch[2])
        self.assertNotEqual(batch[0], batch[1])
        random.random()  # whatever happens between calls does not carry over
        self.assertEqual(decider.decide(wit_failure(jitter_seed=8)), batch[1])

    def test_an_exception_in_a_batch_is_logged_as_a_panic_then_traps_the_call(self) -> None:
        decider = verdict_sdk.export(Probe)()
        with self.assertRaises(RuntimeError):
            decider.decide_batch([wit_failure()])
        self.assertIn("decide-batch called before a successful init", self.host.logs[-1][1])
        decider.init("{}")
        with self.assertRaises(ZeroDivisionError):
            decider.decide_batch([wit_failure("db.timeout"), wit_failure("boom")])
        level, message = self.host.logs[-1]
        self.assertEqual(level, Level.ERROR)
        self.assertTrue(message.startswith("panic: ZeroDivisionError: division by zero"), message)
        with self.assertRaises(TypeError):
            decider.decide_batch([wit_failure("none")])
        self.assertIn("returned NoneType, not a Verdict", self.host.logs[-1][1])
        # The instance keeps serving: the host asks again one failure at a time.
        self.assertEqual(decider.decide(wit_failure("delay")).action, Action_Delay(30_000))
        self.assertEqual(decider.decide(wit_failure("pause")).action, Action_Pause(15_000))

    def test_logging_goes_to_the_host_once_exported(self) -> None:
        decider = verdict_sdk.export(Probe)()
        decider.init("{}")
        decider.decide(wit_failure("db.timeout"))
        self.assertIn((Level.INFO, "deciding db.timeout"), self.host.logs)

    def test_an_exception_in_decide_is_logged_as_a_panic_then_traps(self) -> None:
        decider = verdict_sdk.export(Probe)()
        decider.init("{}")
        with self.assertRaises(ZeroDivisionError):
            decider.decide(wit_failure("boom"))
        level, message = self.host.logs[-1]
        self.assertEqual(level, Level.ERROR)
        self.assertTrue(message.startswith("panic: ZeroDivisionError: division by zero"), message)
        self.assertIn("in decide", message)
        with self.assertRaises(TypeError):
            decider.decide(wit_failure("none"))
        self.assertIn("returned NoneType, not a Verdict", self.host.logs[-1][1])

    def test_decide_before_init_traps_with_a_reason(self) -> None:
        decider = verdict_sdk.export(Probe)()
        with self.assertRaises(RuntimeError):
            decider.decide(wit_failure())
        self.assertIn("decide called before a successful init", self.host.logs[-1][1])

    def test_a_bug_in_init_traps_instead_of_refusing(self) -> None:
        decider = verdict_sdk.export(Broken)()
        with self.assertRaises(KeyError):
            decider.init("{}")
        self.assertTrue(self.host.logs[-1][1].startswith("panic: KeyError: 'oops'"))

    def test_a_reason_that_is_not_unicode_is_a_logged_panic(self) -> None:
        decider = verdict_sdk.export(Probe)()
        decider.init("{}")
        with self.assertRaises(UnicodeEncodeError):
            decider.decide(wit_failure("badtext"))
        self.assertTrue(self.host.logs[-1][1].startswith("panic: UnicodeEncodeError"))

    def test_export_checks_the_policy_class_at_import(self) -> None:
        class Nameless:
            Config = NoConfig

            def decide(self, f: Failure) -> Verdict:
                return Verdict.retry_now()

        with self.assertRaisesRegex(TypeError, "Nameless.name"):
            verdict_sdk.export(Nameless)
        with self.assertRaisesRegex(TypeError, "policy class"):
            verdict_sdk.export(Probe(NoConfig()))  # type: ignore[arg-type]


class NativeTest(unittest.TestCase):
    def test_the_sdk_imports_and_exports_without_bindings(self) -> None:
        # example_policy ran `export` at import with no bindings present: only making a
        # Decider needs them.
        with self.assertRaises(ImportError):
            OrdersDecider()


if __name__ == "__main__":
    unittest.main()
