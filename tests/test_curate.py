"""Difficulty curation: bands, the mix, and ``skyrl curate --from-eval`` on a saved eval of GSM8K."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core.default_plugins.curation.curate import (band, bucket_table, parse_mix, select,
                                                        successes_from_trajectories)
from skyrl_core.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_bands_fold_the_buckets():
    assert [band(c, 4) for c in range(5)] == ["impossible", "hard", "hard", "medium", "easy"]
    assert band(0, 1) == "impossible" and band(1, 1) == "easy"
    with pytest.raises(ValueError, match="within 0..k"):
        band(5, 4)


def test_mix_parsing():
    assert parse_mix(None) == {"impossible": 0.25, "hard": 0.30, "medium": 0.30, "easy": 0.15}
    assert parse_mix("hard=1,easy=1") == {"impossible": 0.0, "hard": 0.5, "medium": 0.0, "easy": 0.5}
    with pytest.raises(ConfigError, match="unknown band 'tricky'; valid: impossible, hard, medium, easy"):
        parse_mix("tricky=1")


def _rows(pattern: dict[str, int], k: int = 4) -> list[dict]:
    return [{"task": "gsm8k", "instance_id": iid, "reward": float(j < c)} for iid, c in pattern.items() for j in range(k)]


def test_select_keeps_the_mix_and_reports_short_bands():
    # 8 impossible, 6 hard, 6 medium, 3 easy -> the largest exact 25/30/30/15 mix is 20 questions
    pattern = {str(i): 0 for i in range(8)} | {str(i): 1 + i % 2 for i in range(8, 14)} | \
              {str(i): 3 for i in range(14, 20)} | {str(i): 4 for i in range(20, 23)}
    succ = successes_from_trajectories(_rows(pattern))
    assert bucket_table(succ) == {"buckets": {"0/4": 8, "1/4": 3, "2/4": 3, "3/4": 6, "4/4": 3},
                                  "bands": {"impossible": 8, "hard": 6, "medium": 6, "easy": 3}}
    chosen, short = select(succ, parse_mix(None))
    assert bucket_table({k: succ[k] for k in chosen})["bands"] == {"impossible": 5, "hard": 6, "medium": 6, "easy": 3}
    assert short == {}
    chosen, short = select(succ, parse_mix(None), size=40)
    assert short == {"impossible": 2, "hard": 6, "medium": 6, "easy": 3}  # targets 10/12/12/6
    assert select(succ, parse_mix(None), seed=1)[0] != select(succ, parse_mix(None), seed=2)[0]


def test_curate_command_on_a_saved_eval(tmp_path):
    saved = tmp_path / "eval"
    saved.mkdir()
    pattern = {"0": 0, "1": 0, "2": 1, "3": 2, "4": 3, "5": 4, "6": 0, "7": 2}
    (saved / "trajectories.jsonl").write_text("\n".join(json.dumps(r) for r in _rows(pattern)) + "\n")
    out = tmp_path / "curated.jsonl"
    env = {**os.environ, "SKYRL_LOAD_PLUGINS": "", "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "curate", str(REPO / "examples" / "gsm8k.yaml"),
                           "data.split=test", "data.limit=8", "--from-eval", str(saved), "--mix",
                           "impossible=1,hard=1,medium=1,easy=1", "--output", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "before: 8 question(s)" in proc.stdout and "after: 4 question(s)" in proc.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["curation"]["band"] for r in rows) == ["easy", "hard", "impossible", "medium"]
    assert all(r["question"] and r["curation"]["k"] == 4 for r in rows)
    easy = next(r for r in rows if r["curation"]["band"] == "easy")
    assert easy["id"] == "5" and easy["curation"]["successes"] == 4
