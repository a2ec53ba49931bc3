import json

import pytest

from budgeter.core import Engine, Policy, contains_marker, trim
from budgeter.core.chains import assemble
from budgeter.core.messages import from_openai_list
from budgeter.errors import InvalidInput, PinnedOverBudget
from tests.bench.bench_service import fresh_count
from tests.bench.sessions import TOOLS, make_session


def _msgs(body):
    return from_openai_list(body["messages"])


def _retries(n=3, chars=7146):
    html = "<!DOCTYPE html><html><head><title>Shop</title></head><body>" + "x" * chars + "</body></html>"
    msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": "make a site"}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
                     "function": {"name": "write_file", "arguments": json.dumps({"path": "", "content": html})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "rejected: path must not be empty"})
    msgs.append({"role": "user", "content": "try again"})
    return from_openai_list(msgs), html


def _handle(text, label="h="):
    return text.split(label)[1][:16]


def test_identical_failed_retries_fold_and_stay_verbatim_until_answered(qwen36):
    msgs, html = _retries()
    r = trim(msgs, counter=qwen36, tools=TOOLS, policy=Policy(window=32768, reserve=0))
    out = r.openai_messages()
    calls = [m for m in out if m.get("tool_calls")]
    assert len(calls) == 1 and not r.compacted  # folded although the prompt fits
    assert json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])["content"] == html  # not answered yet
    stub = next(m for m in out if m["role"] == "tool")["content"]
    assert "x3" in stub and "rejected: path must not be empty" in stub


def test_an_answered_failure_collapses_to_a_stub_whose_handle_is_the_payload(qwen36):
    msgs, html = _retries()
    msgs = [*msgs, *from_openai_list([{"role": "assistant", "content": "I will pick a path."}])]
    r = trim(msgs, counter=qwen36, tools=TOOLS, policy=Policy(window=32768, reserve=0))
    out = r.openai_messages()
    stub = next(m for m in out if m["role"] == "tool")["content"]
    assert "x3" in stub and "html" in stub and "suggested_path=index.html" in stub
    assert "rejected: path must not be empty" in stub and len(stub) < 300
    original = msgs[2].tool_calls[0].arguments
    assert r.payloads[_handle(stub, "args h=")] == original  # the stub names the elided arguments
    args = json.loads(next(m for m in out if m.get("tool_calls"))["tool_calls"][0]["function"]["arguments"])
    assert r.payloads[_handle(args["content"])] == html  # lossless, leaf by leaf too
    assert set(r.handles) >= {_handle(stub, "args h="), _handle(args["content"])}


def test_over_budget_the_pending_failure_loses_its_arguments_but_keeps_its_error(qwen36):
    msgs, html = _retries()
    r = trim(msgs, counter=qwen36, tools=TOOLS, policy=Policy(window=1200, reserve=0))
    out = r.openai_messages()
    stub = next(m for m in out if m["role"] == "tool")["content"]
    assert "x3" in stub and "suggested_path=index.html" in stub
    assert stub.endswith("\nrejected: path must not be empty") and r.tokens <= 1200
    assert r.payloads[_handle(stub, "args h=")] == msgs[2].tool_calls[0].arguments


def test_a_compacting_turn_presses_only_the_failure_not_answered_yet(qwen36):
    """Turn by turn: an answered failure keeps the stub tidy_failures gave it, the failure the
    model has not answered yet keeps its error but loses its arguments, and the step is reported
    under its own name when no failure is pending."""
    msgs, html = _retries(n=1)
    session = Engine(qwen36, policy=Policy(window=32768, reserve=0), tools=TOOLS)
    session.append(msgs)
    session.append(from_openai_list([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "d0", "type": "function", "function": {"name": "write_file", "arguments": json.dumps(
            {"path": "", "content": html.replace("Shop", "Store")})}}]},
        {"role": "tool", "tool_call_id": "d0", "content": "rejected: path must not be empty"}]))
    roomy = session.build()
    answered = next(m.content for m in roomy.messages if m.tool_call_id == "c0")
    assert not roomy.compacted and "args h=" in answered
    session.policy = Policy(window=roomy.tokens - 50, reserve=0, low_water=0.75)
    pressed = session.build()
    assert pressed.compacted and pressed.tokens <= roomy.tokens - 50
    assert next(m.content for m in pressed.messages if m.tool_call_id == "c0") == answered
    pending = next(m for m in pressed.messages if m.tool_call_id == "d0").content
    assert pending.endswith("\nrejected: path must not be empty") and "args h=" in pending
    call = next(c for m in pressed.messages for c in m.tool_calls if c.id == "d0")
    assert len(call.arguments) < 1000 and json.loads(call.arguments)["path"] == ""
    assert any(a.what == "failed_call_collapsed" for s in pressed.steps if s.step == "collapse_pending_failures"
               for a in s.actions)
    session.append(from_openai_list([{"role": "assistant", "content": "I will name the file."}]))
    session.policy = Policy(window=32768, reserve=0)
    session.policy = Policy(window=session.build().tokens - 50, reserve=0, low_water=0.75)
    after = session.build()
    names = [s.step for s in after.steps]
    assert after.compacted and names.count("tidy_failures") == 1 and "collapse_pending_failures" in names
    plain = trim(from_openai_list([{"role": "user", "content": "word " * 3000}]), counter=qwen36,
                 policy=Policy(window=1200, reserve=0))
    names = [s.step for s in plain.steps]
    assert plain.compacted and names.count("tidy_failures") == 1 and "collapse_pending_failures" in names


def test_output_fits_and_is_exact(qwen3_path):
    from budgeter.tokenizers import resolve

    counter = resolve(qwen3_path)
    body = make_session(7, chars=250_000)
    r = trim(_msgs(body), counter=counter, tools=body["tools"], policy=Policy())
    fresh = fresh_count(counter, r.messages, body["tools"])
    assert r.tokens == fresh <= Policy().budget
    assert r.tokens_before > r.tokens


def test_pinned_over_budget_names_what_is_too_big(qwen36):
    msgs = from_openai_list([{"role": "system", "content": "rule " * 3000},
                             {"role": "user", "content": "hi"}])
    with pytest.raises(PinnedOverBudget) as err:
        trim(msgs, counter=qwen36, policy=Policy(window=1000, reserve=100))
    assert "system message #0" in err.value.message


def test_single_message_larger_than_budget_keeps_head_and_tail(qwen36):
    text = "START " + "lorem ipsum " * 4000 + " END"
    msgs = from_openai_list([{"role": "user", "content": text}])
    r = trim(msgs, counter=qwen36, policy=Policy(window=1200, reserve=200))
    content = r.messages[0].content
    assert r.tokens <= 1000 and content.startswith("START") and content.endswith("END")
    assert contains_marker(content)


def test_digest_states_what_was_dropped(qwen36):
    body = make_session(3, chars=400_000)
    r = trim(_msgs(body), counter=qwen36, tools=body["tools"], policy=Policy(window=12000, reserve=0))
    digest = [m for m in r.messages if "budgeter:digest" in m.content]
    assert len(digest) == 1
    handle = digest[0].content.split("h=")[1][:16]
    dropped = json.loads(assemble(handle, r.links.__getitem__))
    originals = [json.dumps(m, sort_keys=True) for m in body["messages"]]
    assert all(json.dumps(m, sort_keys=True) in originals for m in dropped)
    dropping = [a for s in r.steps for a in s.actions if a.what == "turns_dropped"]
    assert dropping and dropping[-1].handle == handle  # the report names the digest's payload


def test_stateful_replay_changes_only_the_tail_between_compactions(qwen36):
    body = make_session(5, chars=500_000)
    session = Engine(qwen36, policy=Policy(window=16384, reserve=1024), tools=body["tools"])
    builds = compactions = reread = appended = 0
    previous: tuple = ()
    msgs = _msgs(body)
    i = 0
    while i < len(msgs):
        j = i + 1
        while j < len(msgs) and msgs[j].role == "tool":
            j += 1
        session.append(msgs[i:j])
        appended += sum(qwen36.message_cost(m) for m in msgs[i:j])
        i = j
        r = session.build()
        assert r.tokens <= session.policy.budget
        assert 0 <= r.cache_break_tokens <= r.tokens
        builds += 1
        reread += r.reread_tokens if previous else 0
        compactions += r.compacted
        if previous and not r.compacted:  # hygiene touches only the last turns of the previous prompt
            assert r.prefix_changed_at >= len(previous) - 6, (builds, r.prefix_changed_at, len(previous))
        previous = r.messages
    assert compactions >= 2
    # stability as a prefix cache sees it: low-water compaction is rare and failures collapse at the
    # tail, so the server reads again little more than what the agent appended
    assert reread <= 1.5 * appended, (reread, appended)


def test_low_water_leaves_headroom(qwen36):
    body = make_session(5, chars=200_000)
    r = trim(_msgs(body), counter=qwen36, tools=body["tools"], policy=Policy(low_water=0.6))
    assert r.tokens <= int(Policy().budget * 0.6) + 200


def test_bad_policy_is_a_clear_error(qwen36):
    with pytest.raises(InvalidInput) as err:
        Engine(qwen36, policy=Policy(window=100, reserve=200))
    assert err.value.field == "policy.reserve"


def test_pairing_is_repaired_for_orphans_and_missing_results(qwen36):
    msgs = from_openai_list([
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "nope", "content": "orphan output"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
    ])
    out = trim(msgs, counter=qwen36).openai_messages()
    assert [m["role"] for m in out] == ["user", "user", "assistant", "tool"]
    assert "orphan output" in out[1]["content"] and out[3]["tool_call_id"] == "a"


def test_policy_dict_round_trips_through_json():
    from budgeter.core.policy import FileTools, policy_from_dict, policy_to_dict

    policy = Policy(window=9000, reserve=100, low_water=0.5, protect_tail_turns=3,
                    file_tools=FileTools(reads=frozenset({"cat", "view"}), by_shape=False,
                                         path_keys=("target",)))
    raw = json.loads(json.dumps(policy_to_dict(policy)))
    assert raw["file_tools"]["reads"] == ["cat", "view"] and raw["file_tools"]["path_keys"] == ["target"]
    assert policy_from_dict(raw) == policy
    assert policy_from_dict(json.loads(json.dumps(policy_to_dict(Policy())))) == Policy()


def test_tokens_before_is_the_request_as_received_and_tidy_failures_reports_tokens(qwen36):
    """A prompt that fits but holds failed retries: ``tokens_before`` is the exact count of what the
    client sent (not of the prompt after the failure clean-up, which it equalled on every turn that
    did not compact), and the clean-up step's report is in tokens (it held message counts)."""
    msgs, _ = _retries(n=3)
    answered = [*msgs, *from_openai_list([{"role": "assistant", "content": "I will name the path."},
                                          {"role": "user", "content": "go on"}])]
    for messages in (msgs, answered):
        r = trim(messages, counter=qwen36, tools=TOOLS, policy=Policy(window=32768, reserve=0))
        assert not r.compacted
        assert r.tokens_before == qwen36.count_prompt(messages, TOOLS) > r.tokens
        step = next(s for s in r.steps if s.step == "tidy_failures")
        saved = step.tokens_before - step.tokens_after
        assert abs(saved - (r.tokens_before - r.tokens)) <= 0.02 * saved, (saved, r.tokens_before, r.tokens)


def test_tokens_before_follows_the_history_turn_by_turn(qwen36):
    msgs, _ = _retries(n=3)
    session = Engine(qwen36, policy=Policy(window=32768, reserve=0), tools=TOOLS)
    for k in range(2, len(msgs) + 1):
        session.append(msgs[k - 1:k] if k > 2 else msgs[:2])
        r = session.build()
        assert r.tokens_before == qwen36.count_prompt(msgs[:k], TOOLS), k


def test_a_views_estimate_prices_only_what_changed_and_equals_the_whole_sum():
    """Context sums per-message costs against the last view it summed (a step changes a few items
    of hundreds): the sum must equal pricing every item, whatever changed."""
    import random

    from budgeter.core.pipeline import Context, Item, Kind
    from budgeter.tokenizers import resolve

    counter = resolve()
    session = Engine(counter, policy=Policy())
    msgs = from_openai_list([{"role": "user", "content": f"message {k} " * (k % 7 + 1)} for k in range(60)])
    ctx = Context(counter, [], Policy(), session.log, target=0)
    view = tuple(Item(k, m) for k, m in enumerate(msgs))
    rng = random.Random(5)
    for _ in range(200):
        out = list(view)
        for _ in range(rng.randint(0, 4)):
            op = rng.choice(["replace", "drop", "add"])
            p = rng.randrange(len(out)) if out else 0
            if op == "replace" and out:
                out[p] = Item(out[p].index, msgs[rng.randrange(len(msgs))], Kind.STUB)
            elif op == "drop" and len(out) > 1:
                del out[p]
            else:
                out.insert(p, Item(p, msgs[rng.randrange(len(msgs))]))
        view = tuple(out)
        assert ctx._sum(view) == sum(counter.message_cost(i.message) for i in view)


def test_the_shared_turns_and_file_events_of_a_view_equal_those_made_afresh(qwen36):
    """Compaction steps share a view's turns, protected positions and file events for as long as
    its shape holds (``Context.derived``): after any rewrite in place, drop or digest, what they get
    must equal what a fresh walk gives."""
    import random
    from dataclasses import replace

    from budgeter.core.pipeline import Context, Item, Kind, protected_positions, units
    from budgeter.core.steps.snapshots import _file_events, _newest, file_events, newest_snapshots

    body = make_session(3, chars=60_000)
    session = Engine(qwen36, policy=Policy(), tools=body["tools"])
    session.append(from_openai_list(body["messages"]))
    ctx = Context(qwen36, body["tools"], Policy(protect_tail_turns=3), session.log, target=0)
    view = tuple(Item(k, m) for k, m in enumerate(session.history))
    assert file_events(view, ctx)  # the session reads and writes files
    rng = random.Random(11)
    for _ in range(150):
        out = list(view)
        for _ in range(rng.randint(0, 3)):
            op, p = rng.choice(["rewrite", "rewrite", "drop", "digest"]), rng.randrange(len(out))
            if op == "rewrite":  # a stub or a shrunk output: same role and call ids
                out[p] = replace(out[p], message=replace(out[p].message, content="(stub)"), kind=Kind.STUB)
            elif op == "drop" and len(out) > 4:
                del out[p]
            elif op == "digest":
                out[p] = Item(out[p].index, from_openai_list([{"role": "user", "content": "digest"}])[0],
                              Kind.DIGEST, (out[p].index,))
        view = tuple(out)
        fresh = Context(qwen36, body["tools"], ctx.policy, session.log, target=0)
        assert ctx.turns(view) == units(view)
        assert ctx.protected(view) == protected_positions(view, ctx.policy)
        assert file_events(view, ctx) == _file_events(view, fresh)
        assert newest_snapshots(view, ctx) == _newest(view, fresh)


def test_stand_in_json_gives_back_a_view_with_nothing_to_fix_as_it_is(qwen36):
    """A view whose new calls all parse comes back as the same tuple (the engine then finds the
    prompt ``normalize_pairing`` left by identity); one with a cut call comes back with that call
    stood in and every other item as it was."""
    from budgeter.core.pipeline import Context, Item, Kind
    from budgeter.core.steps.validity import stand_in_json

    def call(args: str) -> dict[str, object]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": args}}]}

    result = {"role": "tool", "tool_call_id": "c1", "content": "text"}
    for args, fixed in (('{"path": "a.py"}', False), ('{"path": "a.', True)):
        session = Engine(qwen36, policy=Policy(), tools=TOOLS)
        session.append(from_openai_list([{"role": "user", "content": "go"}, call(args), result]))
        ctx = Context(qwen36, TOOLS, Policy(), session.log, target=0)
        view = tuple(Item(k, m) for k, m in enumerate(session.history))
        out, report = stand_in_json(view, ctx)
        assert (out is view) is not fixed
        assert [i.index for i in out] == [0, 1, 2]
        assert [out[k] is view[k] for k in range(3)] == [True, not fixed, True]
        assert (out[1].kind is Kind.STAND_IN) is fixed and bool(report.actions) is fixed
        assert all(json.loads(c.arguments) is not None for i in out for c in i.message.tool_calls)
