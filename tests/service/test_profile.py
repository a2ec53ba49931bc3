"""budgeter profile: the parts add up to the exact count; CLI, HTML in a real browser, RPC."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from budgeter.core.messages import from_openai_list
from budgeter.core.profile import CATEGORIES, profile
from budgeter.tokenizers import resolve
from tests.bench.bench_service import fresh_count
from tests.bench.sessions import make_session
from tests.service.agent import TOOLS, call, result


def small_session() -> list[dict]:
    return [{"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Fix app.py, 请"},
            call("r1", "read_file", {"path": "app.py"}), result("r1", "def f():\n    return 1\n" * 40),
            call("w1", "write_file", {"path": "", "content": "<!DOCTYPE html><html>" + "x" * 900}),
            result("w1", "Error: path must not be empty"),
            call("w2", "write_file", {"path": "app.py", "content": "def f():\n    return 2\n"}),
            result("w2", "ok"),
            {"role": "assistant", "content": "Done."}]


@pytest.mark.parametrize("spec", ["qwen3.6", "qwen3"])
def test_parts_add_up_to_the_exact_count(spec, request):
    counter = resolve(request.getfixturevalue("qwen3_path") if spec == "qwen3" else spec)
    messages = from_openai_list(small_session())
    p = profile(messages, counter=counter, tools=TOOLS).as_dict()
    full = fresh_count(counter, messages, TOOLS)
    assert p["tokens"] == full == sum(p["composition"][c] for c in CATEGORIES)
    assert p["composition"]["tool_schemas"] > 100 and p["composition"]["template_overhead"] > 0
    cats = [m["category"] for m in p["messages"]]
    assert cats == ["system", "user", "assistant", "stale_snapshots", "failed_calls", "tool_failed",
                    "assistant", "tool_ok", "assistant"]
    failed_args = counter.count_text(messages[4].tool_calls[0].arguments)  # the failed write's arguments
    assert p["composition"]["failed_calls"] == p["messages"][4]["failed_tokens"] == failed_args > 100
    assert p["composition"]["tool_failed"] == p["messages"][5]["content_tokens"] < 20
    assert [w["kind"] for w in p["waste_ranked"]] == ["stale_snapshots", "failed_calls_and_results"]
    assert p["waste_ranked"][1]["messages"] == [4, 5] and p["waste_ranked"][1]["tools"] == {"write_file": 1}
    assert set(p["by_tool"]) == {"read_file", "write_file"} and min(p["by_tool"].values()) > 0
    assert p["by_tool"]["read_file"] == p["messages"][2]["tokens"] + p["messages"][3]["tokens"]
    assert p["waste"]["stale_snapshots"] == p["messages"][3]["tokens"]
    assert p["waste"]["failed_calls_and_results"] == p["messages"][4]["tokens"] + p["messages"][5]["tokens"]
    assert p["messages"][4]["kind"] == "css/html" and p["messages"][3]["kind"] == "code"
    assert p["top"][0]["index"] == 3
    assert sum(p["template_overhead"]["per_message"]) > 0
    # each failed call with the evidence it failed on: an empty path for a write is budgeter's verdict
    assert p["failures"] == [{"index": 4, "tool": "write_file", "id": "w1", "why": "verdict"}]


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "budgeter", *args], input=stdin, capture_output=True,
                          text=True, timeout=300)


def test_cli_json_with_two_tokenizers_on_a_jsonl_transcript(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in small_session()))
    out = run("profile", str(path), "-t", "qwen3.6", "-t", "mistral-tekken", "--json", "--window", "4096")
    assert out.returncode == 0, out.stderr
    profiles = json.loads(out.stdout)
    assert [p["tokenizer"] for p in profiles] == ["qwen3.6", "mistral-tekken"]
    for p in profiles:
        assert sum(p["composition"].values()) == p["tokens"] and p["encode_mb_per_s"] > 0
        assert p["compaction"]["fits"]
    bad = run("profile", "-", stdin="not json\nat all")
    assert bad.returncode == 2 and "INVALID_JSON" in bad.stderr


def rgb(hex_color: str) -> tuple[int, ...]:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


def test_failed_calls_are_waste_and_the_terminal_report_leads_with_the_biggest(tmp_path):
    body = tmp_path / "s.json"
    body.write_text(json.dumps(make_session(1, chars=120_000)))
    profiled = json.loads(run("profile", str(body), "--json").stdout)
    failed = [m for m in profiled["messages"] if m["category"] == "failed_calls"]
    assert {m["tool"] for m in failed} >= {"write_file"} and all(m["role"] == "assistant" for m in failed)
    assert profiled["composition"]["failed_calls"] == sum(m["failed_tokens"] for m in failed) > 5000
    biggest = profiled["waste_ranked"][0]
    assert biggest["tokens"] == max(w["tokens"] for w in profiled["waste_ranked"]) > 5000
    out = run("profile", str(body))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"Biggest waste: {biggest['label']}: {biggest['tokens']:,} tokens")
    evidence = Counter(f["why"] for f in profiled["failures"])
    assert "  failed calls by evidence: " + ", ".join(f"{k} {n}" for k, n in evidence.most_common()) in out.stdout


def test_html_report_renders_in_headless_chromium(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    Image = pytest.importorskip("PIL.Image")
    from budgeter.core.profile import LABELS
    from budgeter.report import COLORS

    body = tmp_path / "s.json"
    body.write_text(json.dumps(make_session(1, chars=120_000)))
    page = tmp_path / "r.html"
    out = run("profile", str(body), "-t", "qwen3.6", "-t", "qwen2.5", "--html", str(page))
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # self-contained
    first = json.loads(text.split("id='profile-data'>")[1].split("</script>")[0])[0]
    biggest = first["waste_ranked"][0]
    # the biggest waste comes first, before any table or chart
    assert text.index(f"Biggest waste: {biggest['label']}: <b>{biggest['tokens']:,} tokens") < text.index("<h2>")
    # the budget and window lines are labelled on the charts, and every colour has a legend
    budget = first["compaction"]["budget"]
    assert f">budget {budget:,}</text>" in text and f">window {first['window']:,}</text>" in text
    assert f">budget {budget:,} (window − reserve)</text>" in text and ">within the budget</text>" in text
    for cat in {m["category"] for m in first["messages"]}:
        assert f">{html.escape(LABELS[cat])}</text>" in text, cat
    # the per-message chart has a scale: 0 and round tick values, and the axis names
    timeline = text.split('aria-label="tokens per message"')[1].split("</svg>")[0]
    ticks = [int(t.replace(",", "")) for t in re.findall(r'text-anchor="end">([\d,]+)</text>', timeline)]
    assert ticks[0] == 0 and len(ticks) >= 3 and ticks[-1] >= max(m["tokens"] for m in first["messages"])
    assert ">tokens</text>" in timeline and ">message index</text>" in timeline
    # the failed calls are listed with their evidence
    evidence = text.split("<h2>Failed calls and the evidence for each</h2>")[1].split("<h2>")[0]
    assert first["failures"] and all(f"<td>{f['why']}</td>" in evidence for f in first["failures"])
    shot = tmp_path / "r.png"
    browser = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1600,1400", f"--screenshot={shot}", "--enable-logging=stderr", "--v=0",
         f"file://{page}"], capture_output=True, text=True, timeout=120)
    console = [line for line in browser.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    image = Image.open(shot).convert("RGB")
    colors = {c for _, c in image.getcolors(maxcolors=1 << 24)}
    for hex_color in ("#6f42c1", "#198754", "#fd7e14", "#ffc107", COLORS["failed_calls"]):
        assert rgb(hex_color) in colors, hex_color
    # the first screenful leads with the waste: the failed-calls bar is in the top 250 pixels
    top = image.crop((0, 0, 1600, 250))
    assert rgb(COLORS["failed_calls"]) in {c for _, c in top.getcolors(maxcolors=1 << 24)}
    # the charts use the page width: chart colours right of x=1300 (the old page stopped at 984)
    right = image.crop((1300, 0, 1600, 1400))
    assert rgb(COLORS["tool_ok"]) in {c for _, c in right.getcolors(maxcolors=1 << 24)}


def test_profile_session_rpc_matches_the_local_profile(client):
    s = client.create_session(tools=TOOLS, window=4096, reserve=256)
    s.append(small_session())
    remote = client.profile(s.id, tokenizers=["qwen3.6", "mistral-tekken"])
    local = profile(from_openai_list(small_session()), counter=resolve("qwen3.6"), tools=TOOLS).as_dict()
    assert remote[0]["tokens"] == local["tokens"] and remote[0]["composition"] == local["composition"]
    assert remote[0]["window"] == 4096 and remote[1]["tokenizer"] == "mistral-tekken"
    from budgeter.client import ClientError

    with pytest.raises(ClientError) as e:
        client.profile(s.id, tokenizers=["nope"])
    assert e.value.reason == "UNKNOWN_TOKENIZER"


def test_an_error_result_is_labelled_as_an_error_not_by_its_syntax(qwen36):
    """A failed call's result is an error whatever it is written in (a JSON error object read as
    ``json``, a sentence as ``prose``); a successful JSON result stays ``json``."""
    messages = from_openai_list([
        {"role": "user", "content": "read them"},
        call("a", "write_file", {"path": "", "content": "y" * 300}),
        result("a", json.dumps({"error": "path must not be empty", "code": "EINVAL"})),
        call("b", "write_file", {"path": "", "content": "x" * 300}), result("b", "Error: path must not be empty"),
        call("c", "read_file", {"path": "ok.json"}), result("c", json.dumps({"name": "budgeter", "version": 1})),
        {"role": "assistant", "content": "Done."}])
    p = profile(messages, counter=qwen36, tools=TOOLS).as_dict()
    assert [m["category"] for m in p["messages"]][2:7:2] == ["tool_failed", "tool_failed", "tool_ok"]
    assert [m["kind"] for m in p["messages"]][2:7:2] == ["error", "error", "json"]
    assert p["by_kind"]["error"]["tokens"] > 0


def test_the_profile_says_when_the_session_is_sent_rewritten(llama3_path, qwen36, tmp_path):
    """A template that renders no tools: the profile (figures, terminal page, HTML) says the session
    is sent rewritten; one sent as given says nothing."""
    from budgeter.report import render

    messages = from_openai_list(small_session())
    adapted = profile(messages, counter=resolve(llama3_path), tools=TOOLS).as_dict()
    assert any("tool schemas" in n for n in adapted["adapted"]), adapted["adapted"]
    assert "Sent rewritten for llama3_1's template:</b> template does not render tool schemas" \
        in render([adapted], source="s")
    assert profile(messages, counter=qwen36, tools=TOOLS).as_dict()["adapted"] == []
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"messages": small_session(), "tools": TOOLS}))
    out = run("profile", str(path), "-t", llama3_path)
    assert out.returncode == 0 and "Sent rewritten for llama3_1's template" in " ".join(out.stdout.split())
