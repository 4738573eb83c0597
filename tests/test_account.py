"""The accountant on hand-made histories whose right answer is known: every message in one
bucket, each loss with its cause, the verdict against the promise (issue 41's five defects).
"""

from __future__ import annotations

from mqlab.measure.account import (
    NO_LOSS,
    ONCE,
    Depth,
    Event,
    Failure,
    History,
    Hold,
    HostLost,
    Promise,
    account,
    judge,
    work,
)
from mqlab.measure.account.history import numbers

from .account_histories import MS, S, bits, got, steady

NO_LOSS_3 = Promise(NO_LOSS, "retry = 3 promises no loss")
AT_MOST_ONCE = Promise(ONCE, "retry = 0 promises at most once")


def test_a_cut_in_force_at_the_end_holds_only_what_was_sent_in_its_window_not_earlier_drops() -> (
    None
):
    # defect 1: pika (retry = 3), 200 casts/s for 5 s; its server silently dropped every
    # tenth of the first 800 deliveries; a cut at 4.5 s, never restored, holds the last 100
    # sent (its proxy holds bytes enough for 250 at most): the 80 drops were lost long
    # before the cut, and the proxy's room does not make them held
    c = steady(1, 200, 5)
    drops = list(range(9, 800, 10))
    held = list(range(900, 1000))
    cut = Event("cut node1", "link", int(4.5 * S))
    h = History(
        1, (c,), (got(c, drops + held),), 0, 6 * S, events=(cut,),
        holds=(Hold("cut node1", 250, 250_000),), drain_end="held", slowest_ns=20 * MS,
    )  # fmt: skip
    a = account(h)
    assert (a.delivered, a.held, a.lost, a.unexplained_lost) == (820, 100, 80, 80)
    assert a.held_by == (("cut node1", 100),)
    assert [n for n in range(1000) if a.where(0, 1, n) == ("lost", "")] == drops
    v = judge(a, NO_LOSS_3)
    assert (v.verdict, v.failed) == ("unexplained", True)
    assert "80 lost with no event: unexplained" in v.note
    assert "100 held by link fault cut node1" in v.note
    # the same step without the cut: the 80 are lost the same, and so are the 100
    bare = account(History(1, (c,), (got(c, drops + held),), 0, 6 * S, slowest_ns=20 * MS))
    assert (bare.lost, bare.unexplained_lost, bare.held) == (180, 180, 0)


def test_a_cut_holds_no_more_than_its_proxy_proves_the_rest_is_the_cuts_loss() -> None:
    c = steady(1, 200, 5)
    held = list(range(900, 1000))
    cut = Event("cut node1", "link", int(4.5 * S))
    h = History(
        1, (c,), (got(c, held),), 0, 6 * S, events=(cut,),
        holds=(Hold("cut node1", 30, 3_000),), drain_end="held",
    )  # fmt: skip
    a = account(h)
    # the proxy can hold 30: the last 30 sent; the 70 before them went with the cut
    assert (a.held, a.lost, a.unexplained_lost) == (30, 70, 0)
    assert numbers(a.cells[(0, 1)][("held", "cut node1")]) == list(range(970, 1000))
    assert [(x.name, x.lost) for x in a.causes] == [("cut node1", 70)]
    assert judge(a, NO_LOSS_3).verdict == "broken"


def test_the_ready_count_is_queued_and_a_settled_handed_count_never_hides_a_drop() -> None:
    # pika against RabbitMQ, 200 casts/s for 5 s, every tenth of the first 800 dropped; the
    # queue's ready count (fresh) says 30 of the last sent are in it; its unacknowledged
    # count says 900 (statistics a second old: handed to consumers that have since handled
    # them, or whose acks a cut holds). Neither a cut's proxy (room for 50) nor that count
    # may claim an early drop
    c = steady(1, 200, 5)
    drops = list(range(9, 800, 10))
    missing = list(range(900, 1000))
    cut = Event("cut node1", "link", int(4.5 * S))
    depths = (Depth("q (ready)", 30), Depth("q (unacknowledged)", 900, handed=True))
    h = History(
        1, (c,), (got(c, drops + missing),), 0, 6 * S, events=(cut,), keeps=True,
        depths=depths, holds=(Hold("cut node1", 50),), drain_end="held", quiet_ns=S,
    )  # fmt: skip
    a = account(h)
    assert (a.still_queued, a.held, a.unexplained_lost) == (30, 50, 80), a
    assert numbers(a.cells[(0, 1)][("still_queued", "q (ready)")]) == list(range(970, 1000))
    assert [n for n in range(1000) if a.where(0, 1, n) == ("lost", "")] == drops
    # no fault, servers quiet: what they were handed they had; the drops stay lost
    quiet = account(History(
        1, (c,), (got(c, drops + missing),), 0, 6 * S, keeps=True, depths=depths, quiet_ns=S,
    ))  # fmt: skip
    assert (quiet.still_queued, quiet.unexplained_lost) == (30, 150), quiet
    # a drain cut short while consumers were busy: what they hold is still the broker's
    busy = account(History(
        1, (c,), (got(c, missing),), 0, 6 * S, keeps=True, depths=depths, quiet_ns=S,
        drain_end="limit",
    ))  # fmt: skip
    assert (busy.still_queued, busy.lost) == (100, 0), busy


def test_a_loss_is_the_events_only_when_sent_in_its_window_and_a_failure_only_its_own() -> None:
    # defect 2: zmq, 500 casts/s into 2 servers for 5 s, every tenth of the first 2,000
    # dropped silently; kill_server s1 at 4.5 s loses what sat in s1's socket (2,240 ..
    # 2,299, 30 of them, every other one); one send fails in the drain (number 2,499)
    c = steady(1, 500, 5)
    drops = list(range(9, 2000, 10))
    killed = list(range(2240, 2300, 2))
    kill = Event("kill_server s1", "injected", int(4.5 * S), int(4.5 * S), detect_ns=100 * MS)
    failed = Failure("send_failed", "ConnectionLost: closed", bits([2499]))
    c = type(c)(c.client, c.sent, c.marks, (failed,))
    receipts = (got(c, [*drops, *killed, 2499]),)
    late = Event("send_failed c1", "send_failed", int(5.5 * S), int(5.5 * S))
    h = History(1, (c,), receipts, 0, 6 * S, events=(kill, late), slowest_ns=20 * MS)
    a = account(h)
    assert a.lost == 200 + 30 + 1
    assert a.unexplained_lost == 200  # the drops: before the kill's window, nothing explains them
    causes = {x.name: x.lost for x in a.causes}
    assert causes == {"kill_server s1": 30, "send_failed: ConnectionLost: closed": 1}
    v = judge(a, None)
    assert (v.verdict, v.failed) == ("unexplained", True)
    assert "30 lost during kill_server s1" in v.note
    assert "1 lost in sends that failed (send_failed: ConnectionLost: closed)" in v.note
    # without the drops the kill explains its own, and the step is not failed
    clean = History(1, (c,), (got(c, [*killed, 2499]),), 0, 6 * S, events=(kill, late))
    assert judge(account(clean), None).verdict == "no promise"


def test_sends_refused_while_a_node_is_down_are_that_events_loss_as_well_as_told() -> None:
    # failover's quorum step: pika (retry = 3) at 100 casts/s for 40 s; the queue's node is
    # killed at 10 s and started at 25 s; meanwhile the broker nacks every publish and the
    # driver gives up on each after its retries (1,500 sends, numbers 1,000 .. 2,499), and
    # one send fails at 35 s, long after the node is back (number 3,500)
    c = steady(1, 100, 40)
    down = list(range(1000, 2500))
    failed = (
        Failure("nacked", "DriverError", bits(down)),
        Failure("send_failed", "DriverError", bits([3500])),
    )
    c = type(c)(c.client, c.sent, c.marks, failed)
    kill = Event("kill_node queues", "injected", 10 * S, 25 * S, detect_ns=100 * MS)
    start = Event("start_node queues", "injected", 25 * S, 25 * S)
    h = History(1, (c,), (got(c, [*down, 3500]),), 0, 41 * S, events=(kill, start),
                slowest_ns=20 * MS)  # fmt: skip
    a = account(h)
    assert a.lost == 1501 and a.unexplained_lost == 0
    # the failures are the causes the driver told; the kill is why 1,500 of them failed
    assert {x.name: x.lost for x in a.causes} == {
        "nacked: DriverError": 1500, "send_failed: DriverError": 1,
    }  # fmt: skip
    assert a.refused_during == (("kill_node queues", 1500),)
    v = judge(a, NO_LOSS_3)
    assert (v.verdict, v.failed) == ("broken", True)
    assert "1,500 of the sends that failed sent during kill_node queues" in v.note


def test_a_broker_that_keeps_messages_has_them_queued_and_unaccounted_never_lost() -> None:
    # defect 3: Redis Streams, its consumer killed at 0.5 s: the stream keeps the rest
    c = steady(1, 1000, 2)
    kept = list(range(500, 2000))
    kill = Event("kill_server s0", "injected", S // 2, S // 2)

    def step(*depths: Depth, keeps: bool = True) -> History:
        return History(
            1, (c,), (got(c, kept),), 0, 3 * S, events=(kill,), keeps=keeps, depths=depths,
            quiet_ns=S,
        )  # fmt: skip

    fresh = account(step(Depth("mqlab:rpc:x:t", 1500, age_ns=0)))
    assert (fresh.still_queued, fresh.lost, fresh.unaccounted) == (1500, 0, 0)
    assert judge(fresh, NO_LOSS_3).verdict == "kept"
    # no depth read for a broker that keeps messages: unaccounted, and the step says why
    blind = account(step(Depth("kafka", None, why="the admin API did not answer")))
    assert (blind.lost, blind.unaccounted) == (0, 1500)
    assert blind.unaccounted_why == (("the admin API did not answer", 1500),)
    assert judge(blind, NO_LOSS_3).verdict == "undecided"
    unread = account(step())
    assert (unread.lost, unread.unaccounted) == (0, 1500)
    # a depth read before the servers' last delivery may count what left since
    stale = account(step(Depth("q", 1500, age_ns=5 * S)))
    assert (stale.still_queued, stale.unaccounted) == (0, 1500)
    # a queue's depth counts only its group's messages; the other group's missing are lost
    two = History(
        2, (c,), (got(c, kept, group=0), got(c, kept, group=1)), 0, 3 * S, events=(kill,),
        keeps=True, depths=(Depth("pool0", 1500, frozenset({0})),), quiet_ns=S,
    )  # fmt: skip
    a = account(two)
    assert (a.still_queued, a.unaccounted, a.lost) == (1500, 1500, 0)
    # a broker that keeps nothing (zmq): what is missing after the drain is lost
    assert account(step(keeps=False)).lost == 1500


def test_a_message_the_broker_names_is_the_one_still_queued_not_the_last_one_missing() -> None:
    # issue 43: a Redis server killed at 2 s after reading 201 and before acknowledging it;
    # 640, sent later, was dropped silently. The group's pending entry names 201
    c = steady(1, 100, 7)
    kill = Event("kill_server server1", "injected", 2 * S, int(2.5 * S))

    def step(*depths: Depth) -> History:
        return History(
            1, (c,), (got(c, [201, 640]),), 0, 8 * S, events=(kill,), keeps=True,
            depths=depths, quiet_ns=S, slowest_ns=20 * MS,
        )  # fmt: skip

    named = account(step(Depth("g", 1, named=frozenset({(1, 201)}))))
    assert named.where(0, 1, 201) == ("still_queued", "g")
    assert named.where(0, 1, 640) == ("lost", "")
    assert (named.still_queued, named.lost, named.unexplained_lost) == (1, 1, 1)
    # named among a larger count: the rest of the count goes to the last sent, as before
    more = account(step(Depth("g", 2, named=frozenset({(1, 201)}))))
    assert (more.where(0, 1, 201), more.where(0, 1, 640)) == (("still_queued", "g"),) * 2
    # a named entry already delivered (its ack lost) takes its place in the count: nothing
    # else is called queued for it
    delivered = account(step(Depth("g", 2, named=frozenset({(1, 201), (1, 5)}))))
    assert delivered.where(0, 1, 5) == ("delivered", "")
    assert (delivered.still_queued, delivered.where(0, 1, 640)) == (1, ("lost", ""))


def test_a_link_fault_held_at_the_end_on_a_broker_without_depth_is_counted_not_a_crash() -> None:
    # defect 4: a cut in force at the end, on a broker whose depth cannot be read
    c = steady(1, 100, 2)
    cut = Event("cut node1", "link", S)
    h = History(
        1, (c,), (got(c, range(100, 200)),), 0, 3 * S, events=(cut,), keeps=True,
        holds=(Hold("cut node1", 40),), drain_end="held",
    )  # fmt: skip
    a = account(h)
    assert (a.held, a.unaccounted, a.lost) == (40, 60, 0)
    assert a.delivered + a.held + a.unaccounted == a.expected == 200


def test_failures_count_per_unit_of_intended_work_not_per_attempt() -> None:
    # defect 5: two closed-loop drivers meet the same 2 s outage; one fails fast (10,000
    # Undeliverable a second), the other blocks and fails nothing; both lost 2 s of work
    completions = [100, 100, 100, 0, 0, 100, 100]
    fast = work(completions, 20_000, first_event_s=3.0)
    blocks = work(completions, 0, first_event_s=3.0)
    assert (fast.failed_attempts, fast.failed, fast.outage_s) == (20_000, 200, 2.0)
    assert blocks.failed == 0 and blocks.outage_s == 2.0
    # the share divides by the work meant (completed + failed units), not by attempts
    assert fast.share == round(100 * 200 / 700, 3)
    assert fast.per_outage_s == 10_000.0
    # an open loop's schedule is its own unit: each failed attempt was one slot of it
    assert work(completions, 150, scheduled=700).failed == 150


def test_duplicates_are_dated_like_losses_and_break_only_an_at_most_once_promise() -> None:
    c = steady(1, 100, 3)
    lost_conn = Event("connection_lost s0", "connection_lost", 2 * S, 2 * S)
    twice = [150, 195]  # one long before the event, one in its window
    a = account(History(1, (c,), (got(c, twice=twice),), 0, 4 * S, events=(lost_conn,)))
    assert (a.duplicated, a.delivered, a.unexplained_duplicated) == (2, 298, 1)
    assert [(x.name, x.duplicated) for x in a.causes] == [("connection_lost s0", 1)]
    assert judge(a, NO_LOSS_3).verdict == "unexplained"
    only_in_window = account(
        History(1, (c,), (got(c, twice=[195]),), 0, 4 * S, events=(lost_conn,))
    )
    assert judge(only_in_window, NO_LOSS_3).verdict == "kept"
    assert judge(only_in_window, AT_MOST_ONCE).verdict == "broken"


def test_a_lost_host_leaves_what_it_may_have_received_unaccounted_and_the_rest_its_loss() -> None:
    c = steady(1, 100, 4)
    # the host shipped its receipts at 1 s and was lost at 2 s; nothing came after 1 s
    gone = Event("host h2 lost", "host_lost", 2 * S)
    h = History(
        1, (c,), (got(c, range(100, 400)),), 0, 5 * S, events=(gone,),
        hosts_lost=(HostLost("h2", frozenset({0}), S, 2 * S),),
    )  # fmt: skip
    a = account(h)
    assert a.unaccounted == 100  # sent 1 s .. 2 s: it may have had them
    assert [(x.name, x.lost) for x in a.causes] == [("host h2 lost", 200)]
    assert a.unexplained_lost == 0


def _reported(*said: tuple[float, str, str]) -> list[dict[str, object]]:
    """What a pika client worker ``c1`` reported (its ``spontaneous`` events), in seconds."""
    return [
        {"t_ns": int(t * S), "kind": kind, "worker": "c1", "connection": "mqlab-pika c1",
         "cause": cause}
        for t, kind, cause in said
    ]  # fmt: skip


def test_a_connection_lost_under_flow_control_owns_what_its_client_wrote_since_the_block() -> None:
    # issue 41: pika at most once, 200 casts/s for 8 s; the broker blocked c1's connection
    # at 2 s (memory alarm) and stopped reading it; the kernel gave up on it at 4.5 s. The
    # 500 casts written into it since the block (400 .. 899) are lost: to the connection
    # lost, blamed on c1's sends to whichever group (c1 serves none)
    from mqlab.faults.history import spontaneous as events_of

    c = steady(1, 200, 8)
    roles = {"c1": (frozenset({1}), frozenset()), "s1": (frozenset(), frozenset({0}))}
    said = events_of(_reported(
        (2.0, "blocked", "the broker blocked the connection (low on memory)"),
        (4.5, "connection_lost", "timed out"),
        (4.51, "reconnected", ""),
    ), 0, roles)  # fmt: skip
    lost = list(range(400, 900))
    h = History(1, (c,), (got(c, lost),), 0, 9 * S, events=tuple(e for e, _ in said))
    a = account(h)
    assert (a.lost, a.unexplained_lost) == (500, 0)
    assert [(x.name, x.kind, x.lost) for x in a.causes] == [
        ("connection_lost c1", "connection_lost", 500)
    ]
    assert judge(a, AT_MOST_ONCE).verdict == "kept"
    # the same report without the block: only what was sent in the second before it (from
    # the 100 ms mark that reaches into it, 3.4 s): the 280 sent before are unexplained
    bare = events_of(_reported((4.5, "connection_lost", "timed out"), (4.51, "reconnected", "")),
                     0, roles)  # fmt: skip
    b = account(History(1, (c,), (got(c, lost),), 0, 9 * S, events=tuple(e for e, _ in bare)))
    assert b.unexplained_lost == 280 and b.lost == 500


def test_a_node_killed_not_the_connection_lost_with_it_is_blamed() -> None:
    # a node killed at 3 s; c1 reports its connection lost at 3.2 s (its window reaches back
    # a second, before the kill): what was sent from 3 s is the kill's, not the symptom's
    from mqlab.faults.history import spontaneous as events_of

    c = steady(1, 200, 6)
    roles = {"c1": (frozenset({1}), frozenset())}
    said = events_of(_reported((3.2, "connection_lost", "reset"), (3.3, "reconnected", "")),
                     0, roles)  # fmt: skip
    kill = Event("kill_node node1", "injected", 3 * S, None)
    lost = list(range(600, 660))
    h = History(1, (c,), (got(c, lost),), 0, 7 * S, events=(kill, *(e for e, _ in said)))
    a = account(h)
    assert [(x.name, x.lost) for x in a.causes] == [("kill_node node1", 60)]


def test_a_node_killed_with_a_backlog_loses_all_of_it_not_only_what_its_window_reaches() -> None:
    # kombu (retry = 3), 100 casts/s; a slow consumer let a backlog grow from 0.5 s until the
    # node holding its non-durable queue was killed at 4 s: 350 .. 399 were in the queue,
    # sent long before the kill's window (its start less the slowest delivery seen, 20 ms);
    # 10 .. 19, dropped early with deliveries after them, stay unexplained
    c = steady(1, 100, 6)
    queued, early = list(range(50, 400)), list(range(10, 20))
    kill = Event("kill_node node1", "injected", 4 * S, 5 * S, empties=True)
    h = History(1, (c,), (got(c, early + queued),), 0, 7 * S, events=(kill,), slowest_ns=20 * MS)
    a = account(h)
    assert [(x.name, x.lost) for x in a.causes] == [("kill_node node1", 350)]
    assert [n for n in range(600) if a.where(0, 1, n) == ("lost", "")] == early
    only = account(History(1, (c,), (got(c, queued),), 0, 7 * S, events=(kill,),
                           slowest_ns=20 * MS))  # fmt: skip
    assert (only.unexplained_lost, judge(only, NO_LOSS_3).verdict) == (0, "broken")
    # an event that empties nothing (a link cut) reaches only its window (the 100 ms of
    # sends it meets): the rest is unexplained
    cut = Event("cut node1", "link", 4 * S, 5 * S)
    b = account(History(1, (c,), (got(c, early + queued),), 0, 7 * S, events=(cut,),
                        slowest_ns=20 * MS))  # fmt: skip
    assert [(x.name, x.lost) for x in b.causes] == [("cut node1", 10)]
    assert b.unexplained_lost == 10 + 340
