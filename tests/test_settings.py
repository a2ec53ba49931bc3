"""Settings: flags over BUDGETER_* environment over a TOML file over defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from budgeter.settings import load_settings


def test_defaults_work_out_of_the_box(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    s = load_settings()
    assert (s.host, s.port, s.default_tokenizer) == ("127.0.0.1", 50051, "qwen3.6")
    assert s.store_url == f"sqlite://{tmp_path}/budgeter/budgeter.db"


def test_precedence_and_pairs(monkeypatch, tmp_path):
    config = tmp_path / "budgeter.toml"
    config.write_text('port = 7000\nmetrics_port = 0\nmax_sessions = 5\n[tokenizers]\nfile = "qwen2.5"\n')
    monkeypatch.setenv("BUDGETER_PORT", "6000")
    monkeypatch.setenv("BUDGETER_TOKENIZERS", "a=/models/a, b=qwen2.5")
    s = load_settings(config, max_sessions=9)
    assert s.port == 6000 and s.metrics_port == 0 and s.max_sessions == 9
    assert s.tokenizers == {"a": "/models/a", "b": "qwen2.5"}
    s = load_settings(config, tokenizers=["q=qwen3.6"])
    assert s.tokenizers == {"q": "qwen3.6"}
    monkeypatch.delenv("BUDGETER_TOKENIZERS")
    assert load_settings(config).tokenizers == {"file": "qwen2.5"}


@pytest.mark.parametrize("bad", [{"port": -1}, {"tokenizers": ["nospec"]}, {"max_workers": 0}])
def test_bad_values_are_rejected(bad):
    with pytest.raises(ValidationError):
        load_settings(**bad)


def test_cpus_from_flags_environment_and_file(monkeypatch, tmp_path):
    assert load_settings().cpus == []
    assert load_settings(cpus="2-3,0, 2").cpus == [0, 2, 3]
    config = tmp_path / "budgeter.toml"
    config.write_text("cpus = [1, 0]\n")
    assert load_settings(config).cpus == [0, 1]
    monkeypatch.setenv("BUDGETER_CPUS", "1")
    assert load_settings(config).cpus == [1]


@pytest.mark.parametrize("bad", ["x", "1-0", "0-", "-1", "0,,a"])
def test_bad_cpu_lists_name_the_part(bad):
    with pytest.raises(ValidationError, match="cpus"):
        load_settings(cpus=bad)
